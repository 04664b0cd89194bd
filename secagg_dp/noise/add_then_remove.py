"""Add-then-remove Skellam noise: noise that stays at its target whatever (tolerated) number of clients drops.

Construction (after Jiang et al., "Efficient Privacy-Preserving Federated Learning with Dropout-Resilient
Enforcement of Differential Privacy" (Dordis), EuroSys 2024, Sec. 4 "add-then-remove"; the grouping of levels
is ours). A round has N clients in the roster the clients receive at share_keys (N is known to every client
then; with autonomous check-in it is random, so everything below is a function of the realised N), a target
variance mu for the noise in the sum, and a tolerance fraction tau, D = floor(tau N) tolerated dropouts.
Level boundaries 0 = b_0 < b_1 < ... < b_G = D (``"every"``: b_g = g; ``"log2"``: 1, 2, 4, ..., D). Each
client adds independent symmetric Skellam components

* level 0 (the *base*, never removed): Sk(mu / N);
* group g = 1..G: Sk(v_g), v_g = mu (1/(N - b_g) - 1/(N - b_{g-1})), sampled from its own 128-bit seed.

**Claim.** Let d <= D clients of the roster drop before their masked input is in the sum, and let the server
remove, from every one of the N - d inputs in the sum, the groups g with b_{g-1} >= d (the groups whose every
level is above d). Then the sum carries Sk(mu') with mu' = (N - d) mu / (N - b*) >= mu, b* = min{b_g : b_g >= d};
for ``"every"`` b* = d and mu' = mu exactly, for every d <= D.

*Proof.* A client keeps level 0 and the groups g with b_{g-1} < d, i.e. g = 1..g* where b_{g*} = b*. Its kept
variance telescopes: mu/N + sum_{g<=g*} mu (1/(N - b_g) - 1/(N - b_{g-1})) = mu/N + mu/(N - b*) - mu/(N - b_0)
= mu / (N - b*). The components are independent and a sum of independent symmetric Skellam variables is
symmetric Skellam with the variances added (Skellam 1946; the Poisson halves add), so the N - d inputs carry
Sk((N - d) mu / (N - b*)). With b* = d this is Sk(mu). The excess left by grouping is mu (b* - d) / (N - b*)
(:meth:`NoiseSchedule.excess_variance`), at most mu d'/(N - D) with d' the gap to the next boundary.
For d > D nothing is removed and the sum carries Sk((N - d) mu / (N - D)) < mu: graceful degradation, which
the certificate uses (:meth:`NoiseSchedule.certified_variance`). QED.

The removable components are drawn by :func:`sample_skellam_seeded`, a deterministic function of the seed, so
the server regenerates exactly what a client added (bit for bit, on any platform): an AES-256-CTR keystream
under a key derived from the seed (HKDF-SHA256), one 64-bit word per value, mapped through a fixed-point
inverse CDF table. The table holds the Skellam pmf computed in 60-digit decimal arithmetic (Miller's backward
recurrence for I_k, Abramowitz & Stegun 9.12; decimal arithmetic is correctly rounded, so the table is the same
everywhere) rounded down to multiples of 2^-64, the rounding remainder on 0. So the sampler draws a
distribution within total variation (2K + 1) 2^-64 + 2^-80 of Sk(v) (K the table's half width, the tail beyond
K below 2^-80 by Bernstein's inequality): the same standard as the float64 samplers of this package, which are
exact only up to double rounding.

The discrete Gaussian is not infinitely divisible (a sum of discrete Gaussians is not one), so removing
components would not leave a discrete Gaussian; this mode refuses it (:func:`check_enforceable`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_real
from secagg_dp.crypto import kdf
from secagg_dp.crypto.prg import keystream
from secagg_dp.errors import ParameterError
from secagg_dp.noise._checks import VARIANCE_MAX

__all__ = [
    "GROUPINGS",
    "NOISE_ENFORCEMENTS",
    "LEVEL_SEED_LEN",
    "MASTER_SEED_LEN",
    "SEEDED_VARIANCE_MAX",
    "NoiseSchedule",
    "check_enforceable",
    "level_seeds",
    "next_level_seed",
    "chain_from",
    "noise_commitment",
    "NoiseSpec",
    "sample_skellam_seeded",
    "seeded_skellam_pmf",
    "component",
    "client_noise",
    "removed_noise",
]

GROUPINGS = ("every", "log2")
NOISE_ENFORCEMENTS = ("none", "add-then-remove")
LEVEL_SEED_LEN = 16  # 128-bit seed per removable group
MASTER_SEED_LEN = 32
#: Largest variance of one seeded component (table of about 2 * 10.6 sqrt(v) entries).
SEEDED_VARIANCE_MAX = 1e8
_PREC = 60  # decimal digits of the pmf table
_ONE = 1 << 64


def check_enforceable(mechanism: str) -> str:
    """``mechanism`` if add-then-remove applies to it (``"skellam"``), else ParameterError naming it."""
    if mechanism != "skellam":
        raise ParameterError(
            f"Argument 'mechanism' must be 'skellam' with noise_enforcement = 'add-then-remove', not {mechanism!r}: "
            "the discrete Gaussian is not infinitely divisible, so removing components would not leave a discrete "
            "Gaussian. To fix, use mechanism = 'skellam' or noise_enforcement = 'none'."
        )
    return mechanism


@dataclass(frozen=True)
class NoiseSchedule:
    """The components of one round: target variance ``target_variance`` (mu, in the sum, grid units), roster
    size ``roster`` (N), tolerance ``tolerance`` (tau, D = floor(tau N)) and level ``grouping``."""

    target_variance: float
    roster: int
    tolerance: float
    grouping: str = "log2"

    def __post_init__(self) -> None:
        check_real("target_variance", self.target_variance, lo=0.0, hi=VARIANCE_MAX, lo_open=True)
        check_int("roster", self.roster, lo=1)
        check_real("tolerance", self.tolerance, lo=0.0, hi=1.0, hi_open=True)
        if self.grouping not in GROUPINGS:
            raise ParameterError(f"Argument 'grouping' must be one of {GROUPINGS}, not {self.grouping!r}.")

    @property
    def max_dropouts(self) -> int:
        """D = floor(tau N) (computed exactly from the float tau), capped at N - 1."""
        return min(math.floor(Fraction(self.tolerance) * self.roster), self.roster - 1)

    @property
    def boundaries(self) -> tuple[int, ...]:
        """b_0 = 0 < b_1 < ... < b_G = D: ``"every"`` all of 0..D; ``"log2"`` 0, 1, 2, 4, ..., D."""
        top = self.max_dropouts
        if self.grouping == "every":
            return tuple(range(top + 1))
        out = [0]
        b = 1
        while b < top:
            out.append(b)
            b *= 2
        if top > 0:
            out.append(top)
        return tuple(out)

    @property
    def groups(self) -> int:
        """G, the number of removable groups."""
        return len(self.boundaries) - 1

    def _mu(self) -> Fraction:
        return Fraction(self.target_variance)

    @property
    def base_variance(self) -> float:
        """mu / N: level 0, never removed."""
        return float(self._mu() / self.roster)

    @property
    def group_variances(self) -> tuple[float, ...]:
        """v_g = mu (1/(N - b_g) - 1/(N - b_{g-1})), g = 1..G."""
        n, mu, b = self.roster, self._mu(), self.boundaries
        return tuple(float(mu * (Fraction(1, n - b[g]) - Fraction(1, n - b[g - 1]))) for g in range(1, len(b)))

    def removable(self, dropouts: int) -> tuple[int, ...]:
        """Groups (1-based) whose every level is above ``dropouts`` = d: b_{g-1} >= d; none when d > D."""
        d = check_int("dropouts", dropouts, lo=0, hi=self.roster)
        if d > self.max_dropouts:
            return ()
        b = self.boundaries
        return tuple(g for g in range(1, len(b)) if b[g - 1] >= d)

    def kept_variance_exact(self, dropouts: int) -> Fraction:
        """One client's variance after removal at d dropouts: mu / (N - b*) (d <= D), mu / (N - D) (d > D)."""
        d = check_int("dropouts", dropouts, lo=0, hi=self.roster)
        top = self.max_dropouts
        b_star = top if d > top else min(b for b in self.boundaries if b >= d)
        return self._mu() / (self.roster - b_star)

    def total_variance(self, dropouts: int) -> float:
        """Variance of the noise in the sum of the N - d inputs after removal."""
        d = check_int("dropouts", dropouts, lo=0, hi=self.roster)
        return float((self.roster - d) * self.kept_variance_exact(d))

    def excess_variance(self, dropouts: int) -> float:
        """Noise left above the target by grouping: mu (b* - d)/(N - b*) for d <= D (0 for ``"every"``)."""
        d = check_int("dropouts", dropouts, lo=0, hi=self.roster)
        if d > self.max_dropouts:
            return 0.0
        return float((self.roster - d) * self.kept_variance_exact(d) - self._mu())

    def certified_variance(self, dropouts: int) -> float:
        """The variance the certificate uses: mu for d <= D (the grouping's excess only adds independent
        noise, a post-processing, so it is not credited), (N - d) mu / (N - D) above D."""
        d = check_int("dropouts", dropouts, lo=0, hi=self.roster)
        if d <= self.max_dropouts:
            return float(self.target_variance)
        return float((self.roster - d) * self.kept_variance_exact(d))


def level_seeds(master: bytes, groups: int) -> list[bytes]:
    """The 128-bit seeds of level 0 (index 0, never shared) and groups 1..``groups``.

    Level 0 and group 1 are HKDF-SHA256 of the 32-byte ``master`` with distinct labels; group g + 1 is
    :func:`next_level_seed` of group g, a one-way chain: the seed of group g gives those of every group above
    it (exactly what a removal at d reveals, the groups g*..G) and nothing about the groups below it or level 0
    (HKDF is a PRF in its info argument and one-way in its key)."""
    if not isinstance(master, (bytes, bytearray)) or len(master) != MASTER_SEED_LEN:
        raise ParameterError(f"Argument 'master' must be {MASTER_SEED_LEN} bytes.")
    groups = check_int("groups", groups, lo=0)
    out = [
        kdf.derive(master, info=kdf.context(kdf.LABEL_NOISE_LEVEL_SEED, b"", g), length=LEVEL_SEED_LEN)
        for g in range(min(groups, 1) + 1)
    ]
    while len(out) <= groups:
        out.append(next_level_seed(out[-1]))
    return out


def next_level_seed(seed: bytes) -> bytes:
    """The seed of the next group up: HKDF-SHA256(seed, label ``noise-level-seed`` || "chain"), 128 bits."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != LEVEL_SEED_LEN:
        raise ParameterError(f"Argument 'seed' must be {LEVEL_SEED_LEN} bytes.")
    return kdf.derive(bytes(seed), info=kdf.context(kdf.LABEL_NOISE_LEVEL_SEED, b"chain"), length=LEVEL_SEED_LEN)


def chain_from(seed: bytes, group: int, groups: int) -> dict[int, bytes]:
    """``{g: seed of group g}`` for g = ``group``..``groups``, from the seed of group ``group``."""
    group = check_int("group", group, lo=1)
    out = {group: bytes(seed)}
    for g in range(group + 1, check_int("groups", groups, lo=group) + 1):
        out[g] = next_level_seed(out[g - 1])
    return out


def noise_commitment(top_seed: bytes, *, round_id: bytes, owner: int) -> bytes:
    """SHA-256(label || round || owner || seed of the top group G): any group's seed, chained up to G, opens it
    (the seed has 128 bits of entropy, so the digest hides it in the random-oracle model)."""
    import hashlib

    return hashlib.sha256(kdf.context(kdf.LABEL_NOISE_LEVEL_SEED, round_id, owner) + bytes(top_seed)).digest()


@dataclass(frozen=True)
class NoiseSpec:
    """What a round's add-then-remove noise is, before the roster is known: target variance of the sum
    (grid units), tolerance and grouping. :meth:`schedule` gives the schedule for a roster of N clients."""

    target_variance: float
    tolerance: float
    grouping: str = "log2"

    def __post_init__(self) -> None:
        NoiseSchedule(self.target_variance, 1, self.tolerance, self.grouping)  # validates every field

    def schedule(self, roster: int) -> NoiseSchedule:
        """The :class:`NoiseSchedule` of a roster of ``roster`` clients."""
        return NoiseSchedule(self.target_variance, roster, self.tolerance, self.grouping)


@functools.lru_cache(maxsize=64)
def _table(variance: float) -> tuple[npt.NDArray[np.uint64], int]:
    """(thresholds, K): the fixed-point inverse CDF of Sk(variance) on [-K, K] (see the module docstring)."""
    v = Fraction(variance)
    # Bernstein: P(|X| >= t) <= 2 exp(-t^2 / (2 (v + t/3))) < 2^-80 once t >= 18.5 + sqrt(342 + 111 v).
    half = 20 + math.isqrt(343 + 111 * math.ceil(v)) + 1
    top = 2 * half + 60  # Miller's starting index: the neglected I_top / I_0 is far below 10^-60
    with localcontext() as ctx:
        ctx.prec = _PREC
        ctx.Emax, ctx.Emin = 10**8, -(10**8)
        two_over_v = Decimal(2 * v.denominator) / Decimal(v.numerator)
        vals = [Decimal(0)] * (top + 2)
        vals[top] = Decimal(1)
        for k in range(top, 0, -1):  # I_{k-1} = I_{k+1} + (2k / v) I_k (A&S 9.6.26)
            vals[k - 1] = vals[k + 1] + k * two_over_v * vals[k]
        total = vals[0] + 2 * sum(vals[1:], Decimal(0))  # I_0 + 2 sum I_k = e^v (A&S 9.6.37)
        scale = Decimal(_ONE) / total
        weights = [int(vals[k] * scale) for k in range(half + 1)]  # floor(p_k 2^64), p_k = e^-v I_k(v)
    while weights[half] == 0:  # drop the far tail whose mass rounds to 0 (so every threshold is < 2^64)
        half -= 1
    row = weights[half:0:-1] + weights[: half + 1]  # k = -K..K
    row[half] += _ONE - sum(row)
    cum, acc = [], 0
    for w in row[:-1]:
        acc += w
        cum.append(acc)
    return np.array(cum, dtype=np.uint64), half


def seeded_skellam_pmf(variance: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(k, P(k)) of the distribution :func:`sample_skellam_seeded` draws for ``variance`` (its fixed-point table)."""
    variance = check_real("variance", variance, lo=0.0, hi=SEEDED_VARIANCE_MAX, lo_open=True)
    thr, half = _table(variance)
    cum = np.concatenate([np.zeros(1, np.uint64), thr, np.zeros(1, np.uint64)])  # 2^64 wraps to 0
    weights = np.diff(cum)  # uint64 differences (the last wraps modulo 2^64 to 2^64 - thr[-1]): exact
    return np.arange(-half, half + 1, dtype=np.int64), weights.astype(np.float64) / float(_ONE)


def sample_skellam_seeded(seed: bytes, variance: float, size: int) -> npt.NDArray[np.int64]:
    """``size`` values of Sk(``variance``) as a deterministic function of ``seed`` (>= 16 bytes).

    Key = HKDF-SHA256(seed, label ``noise-component-key``); value i = the inverse fixed-point CDF at the i-th
    little-endian 64-bit word of the AES-256-CTR keystream under that key (integer arithmetic only).
    """
    if not isinstance(seed, (bytes, bytearray)) or len(seed) < LEVEL_SEED_LEN:
        raise ParameterError(f"Argument 'seed' must be at least {LEVEL_SEED_LEN} bytes.")
    variance = check_real("variance", variance, lo=0.0, hi=SEEDED_VARIANCE_MAX, lo_open=True)
    size = check_int("size", size, lo=0)
    thr, half = _table(variance)
    lo, ambiguous = _prefix_index(variance)
    key = kdf.derive(bytes(seed), info=kdf.LABEL_NOISE_COMPONENT)
    words = np.frombuffer(keystream(key, 8 * size), dtype="<u8")
    prefix = (words >> np.uint64(64 - _PREFIX_BITS)).astype(np.intp)
    out: npt.NDArray[np.int64] = lo[prefix].astype(np.int64)
    hard = np.flatnonzero(ambiguous[prefix])  # a threshold falls inside this word's prefix bucket: search
    if hard.size:
        out[hard] = np.searchsorted(thr, words[hard], side="right")
    out -= half
    return out


_PREFIX_BITS = 16


@functools.lru_cache(maxsize=64)
def _prefix_index(variance: float) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
    """For each 16-bit prefix p of a word: the table index of every word in [p 2^48, (p + 1) 2^48) when no
    threshold falls inside that range (then ``ambiguous[p]`` is False), the same value searchsorted would give.
    Only words in a bucket holding a threshold are searched, at most (2K + 1) of 2^16 buckets."""
    thr, _ = _table(variance)
    starts = np.arange(1 << _PREFIX_BITS, dtype=np.uint64) << np.uint64(64 - _PREFIX_BITS)
    ends = starts + np.uint64((1 << (64 - _PREFIX_BITS)) - 1)
    lo = np.searchsorted(thr, starts, side="right")
    hi = np.searchsorted(thr, ends, side="right")
    return lo.astype(np.int32), lo != hi


def component(schedule: NoiseSchedule, seed: bytes, level: int, size: int) -> npt.NDArray[np.int64]:
    """Level ``level`` (0 = base, 1..G = groups) of one client's noise, from that level's seed.

    Groups (removable, so regenerated by the server) use :func:`sample_skellam_seeded`; a group of variance
    v above :data:`SEEDED_VARIANCE_MAX` is the sum of m = ceil(v / max) draws of Sk(v / m) under sub-seeds
    HKDF(seed, j). Level 0 is never revealed nor regenerated, so it only needs to be secret and Skellam: it is
    numpy's Poisson sampler (:func:`secagg_dp.noise.skellam.sample_skellam`) over AES-128-CTR (randomgen
    ``AESCounter``) keyed by the level-0 seed, which takes any variance up to 1e12 at the cost of one draw.
    """
    level = check_int("level", level, lo=0, hi=schedule.groups)
    if level == 0:
        from randomgen import AESCounter

        from secagg_dp.noise.skellam import sample_skellam

        gen = np.random.Generator(AESCounter(key=int.from_bytes(seed[:LEVEL_SEED_LEN], "little")))
        return sample_skellam(schedule.base_variance, size, rng=gen)
    var = schedule.group_variances[level - 1]
    if var <= SEEDED_VARIANCE_MAX:
        return sample_skellam_seeded(seed, var, size)
    parts = math.ceil(var / SEEDED_VARIANCE_MAX)
    out = np.zeros(check_int("size", size, lo=0), dtype=np.int64)
    for j in range(parts):
        sub = kdf.derive(seed, info=kdf.context(kdf.LABEL_NOISE_LEVEL_SEED, b"sub", j), length=LEVEL_SEED_LEN)
        out += sample_skellam_seeded(sub, var / parts, size)
    return out


def client_noise(
    schedule: NoiseSchedule, master: bytes, size: int, *, keep: tuple[int, ...] | None = None
) -> npt.NDArray[np.int64]:
    """One client's noise: level 0 plus the groups in ``keep`` (default all 1..G), each from its seed.

    ``keep=None`` is what a client adds; ``keep`` = the groups not removed is what stays in the sum."""
    seeds = level_seeds(master, schedule.groups)
    levels = range(1, schedule.groups + 1) if keep is None else keep
    out = component(schedule, seeds[0], 0, size)
    for g in levels:
        out += component(schedule, seeds[g], g, size)
    return out


def removed_noise(schedule: NoiseSchedule, seeds: dict[int, bytes], size: int) -> npt.NDArray[np.int64]:
    """Sum of the group components ``{group: seed}`` a server regenerates to remove (level 0 refused)."""
    out = np.zeros(check_int("size", size, lo=0), dtype=np.int64)
    for g, seed in sorted(seeds.items()):
        check_int("group", g, lo=1, hi=schedule.groups)
        out += component(schedule, seed, g, size)
    return out
