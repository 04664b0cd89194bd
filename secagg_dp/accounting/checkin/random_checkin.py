"""Random check-ins (Balle, Kairouz, McMahan, Thakkar & Thakurta 2020) for central and distributed noise.

Mechanism of one epoch of m = ``epoch_rounds`` rounds over n = ``clients`` clients: every client, on its own coin,
takes part in the epoch with probability gamma (after dropouts) and, if so, picks b = ``slots`` of the m rounds
uniformly at random (without replacement). Round j releases the number k_j of clients in it and their clipped
vectors (clip C = 1) summed with noise: ``central`` (:class:`CentralGaussian`, noise std sigma whatever k_j, the
setting of DP-SGD and of Feldman & Shenfeld 2025) or ``distributed`` (a per-k base of
:mod:`secagg_dp.accounting.checkin.bases`: every participant adds its own share, so the noise grows with k_j;
Liew, Hasegawa & Takahashi for the distributed check-in mixtures). Proofs: ``docs/accounting/random-checkin.md``.

**Server** (sees which rounds every client chose). The target's rounds B are revealed and data independent, and
so are the others' choices; the rounds outside B do not depend on the target. The Rényi moment splits exactly
over the revealed variables (as in :mod:`secagg_dp.accounting.checkin.observers`):

    e^{(lam-1) eps(lam)} = (1 - gamma) + gamma E[prod_{j in B} f(1 + K'_j)],  f(k) = e^{(lam-1) eps_base,k(lam)},

K'_j the other clients in round j. Given the number N' ~ Bin(n-1, gamma) of other participants, the indicator
vector of one client's b-subset is a permutation distribution, negatively associated (Joag-Dev & Proschan 1983,
Thm 2.11), and sums of independent NA vectors are NA (ibid., P7); f is non-negative and non-increasing, so
E[prod_j f(1+K'_j) | N'] <= g(N')^b with g(N) = E f(1 + Bin(N, b/m)) (ibid., P2). g is non-increasing in N,
so blocks of N' are bounded at their lower end. For b = 1 no conditioning is needed: K' ~ Bin(n-1, gamma/m)
and the identity is exact. The coalition (:class:`~secagg_dp.accounting.checkin.coalition.Coalition`) replaces
k by k_eff(k) = max(1, min(k, min_sum) - c), non-decreasing, so every step above holds.

**Analyst** (sees k_j and the sums). It sees a post-processing of the server's view, so every server
certificate is an analyst certificate (``pld`` for distributed noise). Under replace-one the ``rdp`` method
also credits the epoch coin (:func:`random_checkin_analyst_rdp`: given the counts, the participants are a
uniform subset; Wang, Balle & Kasiviswanathan 2019, Thm 9, over the allocation stage). For central
Gaussian noise under ``add-remove`` the analyst's pair is the random-allocation pair of Feldman & Shenfeld
2025 mixed with the target's own coin: with X_j = exp((y_j - 1/2)/sigma^2) and S = sum_j X_j,
dP/dQ = 1 - gamma + gamma S/m (b = 1; the others' choices revealed, which only helps the observer), where
under Q the X_j are iid lognormal(-a^2/2, a^2), a = 1/sigma, and under P one uniformly chosen X_j is
lognormal(a^2/2, a^2) with probability gamma. Both privacy-loss distributions (remove: L = log dP/dQ under P;
add: -L under Q) are functions of the one sum S, computed by FFT on a grid with every X_j rounded up (remove)
or down (add): a pointwise-larger loss, i.e. a dominating PLD (Meiser & Mohammadi 2018; dp-accounting's
pessimistic discretisation); X_j above the grid go to loss +infinity; the FFT's wrap-around mass is bounded
by a Chernoff bound and added to infinity. b > 1 with gamma = 1: b-fold composition of 1-out-of-floor(m/b)
allocations (Feldman & Shenfeld 2025, the decomposition pld-accounting uses). Rounding the other way gives
``epsilon_lower``, a lower bound of the same computation (labelled, never a certificate).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
import numpy.typing as npt
from scipy import special

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.accountant import repeated_event
from secagg_dp.accounting.checkin.bases import GaussianSum
from secagg_dp.accounting.checkin.coalition import Coalition
from secagg_dp.accounting.checkin.mixture import CHECKIN_ORDERS, checkin_mixture, coarse_counts, rdp_to_epsilon
from secagg_dp.accounting.checkin.observers import _Shifted, _shifted_log_moment
from secagg_dp.accounting.checkin.tails import binom_window_edge, log_binom_pmf, log_binom_tail_ub
from secagg_dp.accounting.core.accountant import Certificate, PrivacyAccountant, check_observer
from secagg_dp.accounting.core.events import PrivacyEvent, check_neighbouring
from secagg_dp.accounting.core.rdp import check_orders
from secagg_dp.errors import ParameterError

__all__ = [
    "NOISE_MODELS",
    "RANDOM_CHECKIN_METHODS",
    "CentralGaussian",
    "RandomCheckinEpoch",
    "RandomCheckinAccountant",
    "RandomCheckinPldAccountant",
    "RandomCheckinRdpAccountant",
    "random_checkin_rdp",
    "random_checkin_analyst_rdp",
    "random_checkin_pld",
]

NOISE_MODELS = ("central", "distributed")
RANDOM_CHECKIN_METHODS = ("pld", "rdp")
_LOSS_STEP = 1e-4  # PLD loss grid (dp-accounting's value_discretization_interval)
_LOSS_FLOOR = -3.0  # allocation PLD: losses below are raised to it (pessimistic) or dropped (optimistic)
_TAIL = 1e-12  # binomial mass outside the window (moved to +infinity) and Gaussian loss tails per component
_CITATION = (
    "random check-ins: Balle, Kairouz, McMahan, Thakkar & Thakurta 2020; random allocation: Feldman & Shenfeld "
    "2025; revealed-flag decomposition and negative association (Joag-Dev & Proschan 1983, Thm 2.11, P2, P7): "
    "docs/accounting/random-checkin.md; distributed-noise bases: Liew, Hasegawa & Takahashi; "
)
_CITE_METHOD = {
    "pld": "PLD with pessimistic discretisation (Meiser & Mohammadi 2018), composed with dp-accounting",
    "rdp": "RDP composition Mironov 2017, Prop. 1; conversion Canonne, Kamath & Steinke 2020, Prop. 12",
}


@dataclass(frozen=True)
class CentralGaussian:
    """Central noise: the round's sum of clipped vectors (C = 1) plus N(0, sigma^2 I) whatever the number k of
    participants (DP-SGD's and Feldman & Shenfeld 2025's setting). L2 sensitivity 1 (add-remove) or 2
    (replace-one); eps(a) = a Delta^2 / (2 sigma^2) (Mironov 2017, Prop. 7), the same for every k."""

    sigma: float
    neighbouring: str = "add-remove"

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", check_real("sigma", self.sigma, lo=0.0, lo_open=True))
        check_neighbouring(self.neighbouring)

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of the round's sum at clip 1."""
        return 1.0 if self.neighbouring == "add-remove" else 2.0

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        k = np.atleast_1d(np.asarray(k_lo, dtype=np.float64))
        a = np.asarray(orders, dtype=np.float64)
        return np.broadcast_to(a * (self.sensitivity / self.sigma) ** 2 / 2.0, k.shape + a.shape).copy()


@dataclass(frozen=True)
class RandomCheckinEpoch(PrivacyEvent):
    """One epoch of random check-ins (module docstring): n ``clients``, participation probability ``gamma``
    (after dropouts), ``epoch_rounds`` m, ``slots`` b rounds per participating client, base ``mechanism``
    (:class:`CentralGaussian`, or a per-k distributed base of :mod:`secagg_dp.accounting.checkin.bases`,
    replace-one at the client level). ``rdp`` is the server view's curve, an upper bound for the analyst too."""

    mechanism: Any
    clients: int
    gamma: float
    epoch_rounds: int
    slots: int = 1
    neighbouring: str = "replace-one"

    def __post_init__(self) -> None:
        n = check_int("clients", self.clients, lo=1)
        object.__setattr__(self, "clients", n)
        object.__setattr__(self, "gamma", check_probability("gamma", self.gamma, allow_zero=False))
        m = check_int("epoch_rounds", self.epoch_rounds, lo=1)
        object.__setattr__(self, "epoch_rounds", m)
        object.__setattr__(self, "slots", check_int("slots", self.slots, lo=1, hi=m))
        check_neighbouring(self.neighbouring)
        if not callable(getattr(self.mechanism, "rdp_upper", None)):
            raise ParameterError(
                "Argument 'mechanism' must be a base with rdp_upper(k_lo, k_hi, orders) (CentralGaussian, "
                f"GaussianSum, SkellamSum, DDGSum), not {type(self.mechanism).__name__}."
            )
        rel = getattr(self.mechanism, "neighbouring", "replace-one")
        if rel != self.neighbouring:
            raise ParameterError(
                f"Argument 'mechanism' must be stated under {self.neighbouring!r} like the event, not {rel!r} "
                "(the distributed bases are replace-one)."
            )

    @property
    def noise(self) -> str:
        """``"central"`` for :class:`CentralGaussian`, else ``"distributed"``."""
        return "central" if isinstance(self.mechanism, CentralGaussian) else "distributed"

    def rdp(self, orders: Any) -> npt.NDArray[np.float64]:
        a = check_orders(orders)
        ints = a.astype(np.int64)
        if not np.array_equal(ints, a):
            raise ParameterError("Argument 'orders' must be integers for the random check-in mixture.")
        return random_checkin_rdp(self, ints)

    def describe(self) -> dict[str, Any]:
        mech = self.mechanism
        return {
            "type": type(self).__name__,
            "mechanism": {"type": type(mech).__name__, **getattr(mech, "__dict__", {})},
            "clients": self.clients,
            "gamma": self.gamma,
            "epoch_rounds": self.epoch_rounds,
            "slots": self.slots,
            "neighbouring": self.neighbouring,
        }


def random_checkin_rdp(
    event: RandomCheckinEpoch, orders: Any = CHECKIN_ORDERS, coalition: Coalition | None = None
) -> npt.NDArray[np.float64]:
    """Per-epoch RDP curve of the server view (an upper bound for the analyst; module docstring):
    (1/(lam-1)) log((1 - gamma) + gamma M), M = E[g(N')^b] >= E[prod_{j in B} f(1 + K'_j)]."""
    o = np.asarray(orders, dtype=np.int64)
    key = (event, tuple(int(x) for x in o), coalition)
    return _rdp_cached(*key).copy()


@functools.lru_cache(maxsize=64)
def _rdp_cached(
    event: RandomCheckinEpoch, orders: tuple[int, ...], coalition: Coalition | None
) -> npt.NDArray[np.float64]:
    o = np.asarray(orders, dtype=np.int64)
    n, gamma, m, b = event.clients, event.gamma, event.epoch_rounds, event.slots
    shifted = _Shifted(event.mechanism, coalition=coalition)
    if isinstance(event.mechanism, CentralGaussian) and coalition is None:
        log_m = b * (o - 1.0) * event.mechanism.rdp_upper(np.ones(1), np.ones(1), o)[0]
    elif b == 1 or gamma == 1.0 or n == 1:  # K' ~ Bin(n-1, gamma b/m) for b = 1; N' = n-1 for gamma = 1
        p = gamma / m if b == 1 else b / m
        log_m = (1 if b == 1 else b) * _shifted_log_moment(shifted, n - 1, p, o)
    else:
        log_m = _blocked_log_m(shifted, n - 1, gamma, b / m, b, o)
    lead = np.logaddexp(math.log1p(-gamma), math.log(gamma) + log_m) if gamma < 1.0 else log_m
    out = np.asarray(np.maximum(lead, 0.0) / (o - 1.0), dtype=np.float64)
    out.setflags(write=False)
    return out


def _blocked_log_m(shifted: _Shifted, n_others: int, gamma: float, p: float, b: int, o: np.ndarray) -> np.ndarray:
    """log E_{N'}[g(N')^b], N' ~ Bin(n_others, gamma), g non-increasing: blocks [lo, hi] of N' bounded by
    g(lo)^b, weights from the binomial pmf; below the window geometric blocks [lo, 2 lo] bounded by g(lo)^b times
    a rigorous bound on their binomial mass; the mass above by g(window top)^b (g non-increasing)."""
    log_b = math.log(_TAIL)
    a = binom_window_edge(n_others, gamma, log_b, True)
    top = binom_window_edge(n_others, gamma, log_b, False)
    parts = []
    lo = 0  # below the window: blocks [0, 0], [1, 1], [2, 3], [4, 7], ... each bounded by g(lo)^b times a
    while lo < a:  # rigorous tail bound on its binomial mass (g(0)^b = f(1)^b alone would swamp the sum)
        hi = min(a - 1, 2 * lo if lo > 0 else 0)
        tail = float(log_binom_tail_ub(n_others, np.array([float(lo)]), np.array([float(hi)]), gamma)[0])
        parts.append(tail + b * _shifted_log_moment(shifted, lo, p, o))
        lo = hi + 1
    k = a
    pmf_cache = np.exp(log_binom_pmf(n_others, np.arange(a, top + 1, dtype=np.float64), gamma))
    while k <= top:
        h = min(top, max(k, math.floor(k * 1.02)))
        w = float(pmf_cache[k - a : h - a + 1].sum())
        if w > 0.0:
            parts.append(math.log(w) + b * _shifted_log_moment(shifted, k, p, o))
        k = h + 1
    if top < n_others:
        tail = float(log_binom_tail_ub(n_others, np.array([top + 1.0]), np.array([float(n_others)]), gamma)[0])
        parts.append(tail + b * _shifted_log_moment(shifted, top, p, o))
    stacked = np.vstack(parts)
    return np.asarray(np.logaddexp.reduce(stacked, axis=0)) + 1e-12  # relative rounding guard (only adds)


# ----------------------------------------------------------------------------------- analyst (replace-one)

_ANALYST_MAX_ORDER = 256  # the amplified analyst curve is computed up to this order; above it, the server's
_K_GRID = 5e-3  # ratio - 1 of the participant-count grid of the allocation stage (exact below about 200)


@functools.lru_cache(maxsize=4096)
def _stage_curve(event: RandomCheckinEpoch, participants: int, orders: tuple[int, ...]) -> np.ndarray:
    """(b/(lam-1)) log g_lam(K-1), g(N) = E f(1 + Bin(N, b/m)): the allocation stage's RDP at K participants."""
    o = np.asarray(orders, dtype=np.int64)
    b = event.slots
    log_g = _shifted_log_moment(_Shifted(event.mechanism), participants - 1, b / event.epoch_rounds, o)
    out = np.asarray(b * log_g / (o - 1.0), dtype=np.float64)
    out.setflags(write=False)
    return out


@dataclass(frozen=True)
class _AllocationStage:
    """Stage two of the analyst's decomposition: K participants (data fixed) allocated to the epoch's rounds,
    each round's count and noisy sum released. Replace-one RDP at order lam, for every pair of K-client datasets:
    revealing the allocation only helps the observer, the allocation's law is data independent, so the moment
    is E[prod_{j in B} f(1 + K'_j)] <= g(K-1)^b (module docstring: exact for b = 1, negative association for
    b >= 2 with N' = K - 1 fixed). Non-increasing in K (f non-increasing, Bin(N, .) stochastically increasing
    in N), so a block [k_lo, k_hi] is bounded at k_lo (:class:`_CoarseSubsampled` hands it grid points only)."""

    event: RandomCheckinEpoch
    neighbouring: str = "replace-one"

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        o = tuple(int(x) for x in np.asarray(orders, dtype=np.int64))
        k = np.maximum(np.atleast_1d(np.asarray(k_lo, dtype=np.float64)), 1.0)  # the target takes part: K >= 1
        return np.array([_stage_curve(self.event, int(kk), o) for kk in k]).reshape(k.size, len(o))


@dataclass(frozen=True)
class _CoarseSubsampled:
    """The subsampled allocation stage with K coarsened to the grid: a block [k_lo, k_hi] is bounded by the
    bound at (grid point at or below k_lo, grid point at or above k_hi), each distinct pair evaluated once.
    Theorem 9 and the joint-convexity term are non-decreasing in the rate and in eps_2, which is non-increasing
    in K, so the widened block's bound is an upper bound on the block's."""

    inner: Any  # SubsampledCheckin over _AllocationStage
    n: int
    neighbouring: str = "replace-one"

    def log_expm1_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> np.ndarray:
        lo, hi = coarse_counts(np.atleast_1d(k_lo), np.atleast_1d(k_hi), _K_GRID, self.n)
        keys, inv = np.unique(np.stack([lo, hi], axis=1), axis=0, return_inverse=True)
        vals = self.inner.log_expm1_upper(keys[:, 0], keys[:, 1], orders)
        return np.asarray(vals[inv.ravel()], dtype=np.float64)


def random_checkin_analyst_rdp(event: RandomCheckinEpoch, orders: Any = CHECKIN_ORDERS) -> npt.NDArray[np.float64]:
    """Per-epoch RDP curve of the analyst (sees every round's count and sum), ``replace-one``: the server's
    curve (:func:`random_checkin_rdp`, post-processing), and at orders up to 256 the smaller of it and the
    amplification by the epoch coin.

    Decomposition: K = sum_j k_j / b is revealed (a function of the counts) and data independent, so the Rényi
    moment is the average over K of the conditional moments (exactly). Given K, the participants are a
    uniformly random K-subset of the n clients (every client's coin and choice are iid), and the rest (the
    allocation, the counts and the sums) is the allocation stage on them (:class:`_AllocationStage`, RDP
    eps_2(K) for every pair of K-client datasets differing in one). Sampling K of n without replacement,
    replace-one: Wang, Balle & Kasiviswanathan 2019, Theorem 9, at rate K/n, never above the joint-convexity
    term 1 + (K/n) expm1((lam-1) eps_2(K)) (:class:`~secagg_dp.accounting.checkin.mixture.SubsampledCheckin`,
    ``"auto"``); averaged over K ~ Bin(n, gamma) by
    :func:`~secagg_dp.accounting.checkin.mixture.checkin_mixture` (an upper bound). Averaging the joint term
    gives back the server's moment (E[(K/n) h(K-1)] = gamma E[h(N')], N' ~ Bin(n-1, gamma)), so the gain is
    Theorem 9's: the epoch coin hides whether the target took part. Which round it took is not credited (the
    analyst's pair with the counts revealed is a shuffle of heterogeneous sums, for which no certified bound
    is known to us); at gamma = 1 the curve is the server's. ``add-remove`` (central noise): the server's.
    """
    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin

    o = np.asarray(orders, dtype=np.int64)
    server = random_checkin_rdp(event, o)
    low = o <= _ANALYST_MAX_ORDER
    if event.neighbouring != "replace-one" or event.gamma == 1.0 or not np.any(low):
        return server
    n = event.clients
    provider = _CoarseSubsampled(SubsampledCheckin(_AllocationStage(event), n, amplification="auto"), n)
    mix = checkin_mixture(provider, n, event.gamma, o[low])
    out = server.copy()
    out[low] = np.minimum(server[low], np.logaddexp(0.0, mix.log_sm1) / (o[low] - 1.0))
    return out


# ----------------------------------------------------------------------------------------------- PLD


@dataclass(frozen=True)
class _LossPmf:
    """A loss pmf on the grid i * _LOSS_STEP (i from ``lower``), plus mass at +infinity."""

    lower: int
    probs: np.ndarray
    inf_mass: float


def _to_dp(pmf: _LossPmf, pessimistic: bool) -> Any:
    from dp_accounting.pld import pld_pmf

    return pld_pmf.DensePLDPmf(_LOSS_STEP, pmf.lower, pmf.probs, pmf.inf_mass, pessimistic)


def _gaussian_mixture_pmf(w: np.ndarray, mu: np.ndarray, w_null: float, inf_mass: float, up: bool) -> _LossPmf:
    """P-law of the revealed mixture: loss 0 w.p. w_null, N(mu^2/2, mu^2) w.p. w_k (the Gaussian pair
    (N(mu, 1), N(0, 1)); Balle & Wang 2018), discretised up (pessimistic) or down (optimistic)."""
    z = -special.ndtri(_TAIL)
    lo = math.floor(float(np.min(mu * mu / 2.0 - z * mu, initial=0.0)) / _LOSS_STEP) - 1
    hi = math.ceil(float(np.max(mu * mu / 2.0 + z * mu, initial=0.0)) / _LOSS_STEP) + 1
    edges = np.arange(lo - 1, hi + 1) * _LOSS_STEP  # cell i: (edge[i-1], edge[i]]
    probs = np.zeros(hi - lo + 1)
    over = inf_mass
    for wk, mk in zip(w, mu, strict=True):
        cdf = special.ndtr((edges - mk * mk / 2.0) / mk)
        cell = np.diff(cdf)
        if up:  # (x_{i-1}, x_i] -> x_i; below the grid -> its lowest point; above -> +infinity
            cell[0] += cdf[0]
            over += wk * (1.0 - cdf[-1])
            probs += wk * cell
        else:  # [x_i, x_{i+1}) -> x_i; above the grid -> its top point; below -> dropped (loss -infinity)
            cell = np.append(cell[1:], 1.0 - cdf[-1])
            probs += wk * cell
    probs[-lo] += w_null  # loss 0 sits at index -lo
    return _LossPmf(lo, probs, over)


def _server_pmf(event: RandomCheckinEpoch, coalition: Coalition | None, up: bool) -> _LossPmf:
    mech, n, gamma, m, b = event.mechanism, event.clients, event.gamma, event.epoch_rounds, event.slots
    if isinstance(mech, CentralGaussian) and coalition is None:
        mu = np.array([math.sqrt(b) * mech.sensitivity / mech.sigma])  # b revealed rounds: one Gaussian
        return _gaussian_mixture_pmf(np.array([gamma]), mu, 1.0 - gamma, 0.0, up)
    if b != 1:
        raise ParameterError("The random check-in PLD supports 'slots' = 1 for distributed noise; use method 'rdp'.")
    sig = mech.sigma
    p, others = gamma / m, n - 1
    log_b = math.log(_TAIL / 2.0)
    if others == 0:
        a = top = 0
        p_out = 0.0
    else:
        a, top = binom_window_edge(others, p, log_b, True), binom_window_edge(others, p, log_b, False)
        p_out = 0.0
        if a > 0:
            p_out += math.exp(float(log_binom_tail_ub(others, np.array([0.0]), np.array([a - 1.0]), p)[0]))
        if top < others:
            p_out += math.exp(float(log_binom_tail_ub(others, np.array([top + 1.0]), np.array([others * 1.0]), p)[0]))
    ks = np.arange(a, top + 1, dtype=np.float64)
    pmf = np.exp(log_binom_pmf(others, ks, p)) if others > 0 else np.ones(1)
    los, his, ws = [], [], []
    k = a
    while k <= top:
        h = min(top, max(k, math.floor(k * 1.002)))
        los.append(k)
        his.append(h)
        ws.append(float(pmf[k - a : h - a + 1].sum()))
        k = h + 1
    k_lo, k_hi = np.array(los, dtype=np.float64) + 1.0, np.array(his, dtype=np.float64) + 1.0
    if coalition is not None:
        k_lo, k_hi = coalition.k_eff(k_lo), coalition.k_eff(k_hi)
    if isinstance(mech, CentralGaussian):
        mu = np.full(k_lo.shape, mech.sensitivity / sig)
    else:
        mu = 2.0 / (sig * np.sqrt(k_lo if up else k_hi))  # GaussianSum: std sigma sqrt(k), sensitivity 2
    w = gamma * np.array(ws)
    return _gaussian_mixture_pmf(w, mu, 1.0 - gamma, gamma * p_out if up else 0.0, up)


def _lognormal_cells(h: float, size: int, mean: float, sd: float, up: bool) -> tuple[np.ndarray, float]:
    """Mass of exp(N(mean, sd^2)) per grid point i h, i < size: rounded up ((i-1)h, ih] or down [ih, (i+1)h);
    returns (pmf, mass above the grid)."""
    edges = np.arange(size + 1) * h
    with np.errstate(divide="ignore"):
        cdf = special.ndtr((np.log(edges) - mean) / sd)
    if up:
        pmf = np.concatenate(([0.0], np.diff(cdf[:size])))
        return pmf, float(1.0 - cdf[size - 1])
    return np.diff(cdf), float(1.0 - cdf[size])


@dataclass(frozen=True)
class _SumLaw:
    """Grid law (step h) of S = X_1 + ... + X_m on [0, size h), every X_j rounded one way (module docstring):
    ``q`` under Q (all X_j ~ lognormal(-a^2/2, a^2)), ``p`` with X_1 ~ lognormal(a^2/2, a^2) instead; ``wrap``
    a Chernoff bound on the mass the cyclic FFT misplaced (grid sums >= length h)."""

    q: np.ndarray
    p: np.ndarray
    h: float
    wrap: float


def _sum_law(sigma: float, m: int, h: float, s_max: float, up: bool) -> _SumLaw:
    """Values above the grid: lost (rounded up: the sum is above the grid too, handled by the caller as loss
    +infinity or -infinity) or put at the grid's top (rounded down: still below the true value)."""
    from scipy import fft

    a = 1.0 / sigma
    size = int(math.ceil(s_max * m / h))
    pq, tq = _lognormal_cells(h, size, -a * a / 2.0, a, up)
    pp, tp = _lognormal_cells(h, size, a * a / 2.0, a, up)
    if not up:
        pq[-1] += tq
        pp[-1] += tp
    length = fft.next_fast_len(2 * size, real=True)
    fq = fft.rfft(pq, length)
    fm1 = fq ** (m - 1)
    law_q = fft.irfft(fm1 * fq, length)[:size]
    law_p = fft.irfft(fm1 * fft.rfft(pp, length), length)[:size]
    wrap = _wrap_bound(pq, pp, m, h, length)
    return _SumLaw(np.maximum(law_q, 0.0), np.maximum(law_p, 0.0), h, wrap)


def _loss_pmf(law: _SumLaw, m: int, gamma: float, direction: str, pessimistic: bool) -> _LossPmf:
    """Remove: L = log(1 - gamma + gamma S/m) under P = (1-gamma) Q + gamma P_1; add: -L under Q. Losses rounded
    up (pessimistic) or down (optimistic) to the PLD grid. Pessimistic: the mass not on the finite grid (values or
    sums beyond it, loss +inf at S = 0 in the add direction, the FFT's negative rounding) goes to +infinity and
    the misplaced wrap-around mass (at most ``wrap``) is counted there once more; optimistic: dropped."""
    s = np.arange(law.q.size) * law.h
    with np.errstate(divide="ignore"):
        loss = np.log1p(gamma * (s / m - 1.0))
    if direction == "remove":
        mass = (1.0 - gamma) * law.q + gamma * law.p
    else:
        mass, loss = law.q, -loss
    floor = int(round(_LOSS_FLOOR / _LOSS_STEP))
    if pessimistic:  # losses below the floor raised to it (a larger loss: still dominating)
        keep = np.isfinite(loss) | (loss < 0)
        idx = np.maximum(np.ceil(np.nan_to_num(loss[keep], neginf=_LOSS_FLOOR) / _LOSS_STEP - 1e-9), floor)
        weights = mass[keep]
    else:  # losses below the floor dropped (loss -infinity: a smaller loss)
        keep = np.isfinite(loss) & (loss >= _LOSS_FLOOR)
        idx = np.floor(loss[keep] / _LOSS_STEP + 1e-9)
        weights = mass[keep]
    idx = idx.astype(np.int64)
    lo = int(idx.min())
    probs = np.bincount(idx - lo, weights=weights)
    inf_mass = float(min(1.0, max(0.0, 1.0 - probs.sum()) + law.wrap)) if pessimistic else 0.0
    return _LossPmf(lo, probs, inf_mass)


def _allocation_plds(sigma: float, m: int, gamma: float, h: float, s_max: float) -> tuple[Any, Any, float]:
    """(pessimistic, optimistic) dp-accounting PLDs of one central random allocation (analyst, add-remove) and
    the optimistic side's misplaced mass. Remove needs S rounded up for the upper bound, add needs it rounded
    down; the optimistic PLDs take the other grid, so two sum laws serve all four."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    up = _sum_law(sigma, m, h, s_max, True)
    down = _sum_law(sigma, m, h, s_max, False)
    pess = pld.PrivacyLossDistribution(
        _to_dp(_loss_pmf(up, m, gamma, "remove", True), True), _to_dp(_loss_pmf(down, m, gamma, "add", True), True)
    )
    opt = pld.PrivacyLossDistribution(
        _to_dp(_loss_pmf(down, m, gamma, "remove", False), False), _to_dp(_loss_pmf(up, m, gamma, "add", False), False)
    )
    return pess, opt, up.wrap + down.wrap


def _wrap_bound(pq: np.ndarray, pl: np.ndarray, m: int, h: float, length: int) -> float:
    """Chernoff bound P(sum >= length h) <= e^{-t length h} M_q(t)^{m-1} M_p(t) for the grid values: the mass
    the cyclic FFT wraps around (misplaced)."""
    chunk = 64  # the bound on coarse bins: each bin's mass at its largest value (e^{tx} is increasing)
    pad = (-pq.size) % chunk
    cq = np.pad(pq, (0, pad)).reshape(-1, chunk).sum(axis=1)
    cl = np.pad(pl, (0, pad)).reshape(-1, chunk).sum(axis=1)
    xs = (np.arange(cq.size) + 1.0) * chunk * h
    best = 1.0
    top = length * h
    for c in (4.0, 12.0, 24.0, 40.0):
        t = c / (pq.size * h)
        e = np.exp(t * xs - 2.0 * c)  # t x <= c (1 + chunk / size) < 2c on the grid: no overflow
        lq = math.log(max(float(np.dot(cq, e)), 1e-300)) + 2.0 * c
        lp = math.log(max(float(np.dot(cl, e)), 1e-300)) + 2.0 * c
        best = min(best, math.exp(min(0.0, -t * top + (m - 1) * lq + lp)))
    return best


def _h_for(m: int, sigma: float) -> float:
    """Grid step of the lognormals: the loss moves by at most about h per epoch (every X_j rounded by h)."""
    return 4e-3


def _s_max(sigma: float, m: int) -> float:
    """S/m at the grid's top, 1 + 18 standard deviations of S/m under P: beyond it the loss goes to +infinity
    (pessimistic; the mass there is computed, not assumed)."""
    a = 1.0 / sigma
    sd = math.sqrt(math.expm1(a * a) * math.exp(a * a) / m)
    return float(min(max(1.5, 1.0 + 18.0 * sd), 64.0))


@dataclass(frozen=True)
class RandomCheckinPLD:
    """(epsilon, delta) from the PLD of E epochs: ``epsilon`` certifies (pessimistic), ``epsilon_lower`` is the
    optimistic discretisation of the same computation (a labelled lower bound, never a certificate)."""

    epsilon: float
    epsilon_lower: float
    delta: float
    observer: str
    route: str  # "allocation" (central, analyst) or "revealed" (the server view; the analyst by post-processing)


def _epoch_plds(event: RandomCheckinEpoch, observer: str, coalition: Coalition | None) -> tuple[Any, Any, str, float]:
    """(pessimistic, optimistic) dp-accounting PLDs of one epoch for ``observer``, the route taken and the
    optimistic side's misplaced mass."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    mech = event.mechanism
    central_analyst = (
        observer == "analyst"
        and isinstance(mech, CentralGaussian)
        and event.neighbouring == "add-remove"
        and (event.slots == 1 or event.gamma == 1.0)
    )
    if central_analyst:
        pess, opt, wrap = _allocation_epoch(mech.sigma, event.epoch_rounds, event.slots, event.gamma)
        return pess, opt, "allocation", wrap
    if not isinstance(mech, (CentralGaussian, GaussianSum)):
        raise ParameterError(
            f"The random check-in PLD needs a Gaussian base (CentralGaussian or GaussianSum), not "
            f"{type(mech).__name__}; use method 'rdp'."
        )
    out = []
    for up in (True, False):
        pmf = _server_pmf(event, coalition if observer == "coalition" else None, up)
        out.append(pld.PrivacyLossDistribution(_to_dp(pmf, up)))
    return out[0], out[1], "revealed", 0.0


@functools.lru_cache(maxsize=32)
def _allocation_epoch(sigma: float, m: int, b: int, gamma: float) -> tuple[Any, Any, float]:
    """One epoch of central random allocation (analyst, add-remove): b = 1 directly; b > 1 (gamma = 1) as the
    composition of b allocations of 1 out of floor(m/b) or ceil (Feldman & Shenfeld 2025). The optimistic side
    side's misplaced mass (at most ``wrap``) is added to delta for the lower bound (:func:`random_checkin_pld`)."""
    sizes = [m // b + (1 if i < m % b else 0) for i in range(b)]
    pess: Any = None
    opt: Any = None
    wrap = 0.0
    for size in sizes:
        p, o, w = _allocation_plds(sigma, size, gamma, _h_for(size, sigma), _s_max(sigma, size))
        pess = p if pess is None else pess.compose(p)
        opt = o if opt is None else opt.compose(o)
        wrap += w
    return pess, opt, wrap


def _composed(
    events: list[tuple[RandomCheckinEpoch, int]], observer: str, coalition: Coalition | None
) -> tuple[Any, Any, str, float]:
    """(pessimistic, optimistic) dp-accounting PLDs of every epoch composed, the routes taken and the total
    misplaced mass of the optimistic side (a union bound over the epochs)."""
    pess: Any = None
    opt: Any = None
    routes = set()
    wrap = 0.0
    for ev, count in events:
        if count == 0:
            continue
        p, o, route, w = _epoch_plds(ev, observer, coalition)
        routes.add(route)
        wrap += count * w
        p, o = (p.self_compose(count), o.self_compose(count)) if count > 1 else (p, o)
        pess = p if pess is None else pess.compose(p)
        opt = o if opt is None else opt.compose(o)
    return pess, opt, "+".join(sorted(routes)) or "none", wrap


def random_checkin_pld(
    events: list[tuple[RandomCheckinEpoch, int]],
    delta: float,
    observer: str = "analyst",
    coalition: Coalition | None = None,
) -> RandomCheckinPLD:
    """Certificate at ``delta`` for the composition of ``count`` epochs of each event (module docstring).

    ``epsilon_lower`` is the optimistic PLD's epsilon at delta + w, w the misplaced FFT mass of its epochs: the
    optimistic PLD overstates delta by at most w (a union bound over the composed factors), so the true
    epsilon at delta is at least that."""
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    check_observer(observer)
    pess, opt, route, wrap = _composed(events, observer, coalition)
    if pess is None:
        return RandomCheckinPLD(0.0, 0.0, delta, observer, route)
    eps = _epsilon(pess, delta)
    low = _epsilon(opt, min(delta + wrap, 1.0))
    return RandomCheckinPLD(eps, min(low, eps), delta, observer, route)


def _epsilon(pld: Any, delta: float) -> float:
    """dp-accounting's get_epsilon_for_delta, vectorised: the max over both directions of
    :func:`secagg_dp.accounting.checkin.pld.epsilon_for_delta` (the same arithmetic, tested equal there) on the
    dense pmfs; dp-accounting's own method for any other representation."""
    from secagg_dp.accounting.checkin.pld import epsilon_for_delta

    out = 0.0
    for pmf in (pld._pmf_remove, pld._pmf_add):
        probs = getattr(pmf, "_probs", None)
        if probs is None:
            return max(0.0, float(pld.get_epsilon_for_delta(delta)))
        losses = (pmf._lower_loss + np.arange(probs.size)) * pmf._discretization
        out = max(out, epsilon_for_delta(losses, probs, float(pmf._infinity_mass), delta))
    return out


def _unwrap(event: Any) -> tuple[RandomCheckinEpoch, int] | None:
    return repeated_event(event, RandomCheckinEpoch)


class RandomCheckinAccountant(PrivacyAccountant):
    """Random check-in epochs (:class:`RandomCheckinEpoch`) under the accountant contract.

    ``method="pld"``: :func:`random_checkin_pld` (Gaussian bases; slots = 1 for distributed noise);
    ``method="rdp"``: :func:`random_checkin_rdp` (server, coalition) or :func:`random_checkin_analyst_rdp`
    (analyst) composed by addition (Mironov 2017, Prop. 1), converted by Canonne, Kamath & Steinke 2020,
    Prop. 12. ``observer`` "analyst", "server" or "coalition" (then ``coalition=Coalition(c, min_sum)``).
    ``amplified=False`` gives the analyst the server's curve: for schedules outside the event's model, such as
    the simulator's per-round dropouts with b > 1, where the participants are not a uniform subset given the
    counts."""

    def __init__(
        self,
        neighbouring: str = "replace-one",
        *,
        observer: str = "analyst",
        method: str = "pld",
        coalition: Coalition | None = None,
        orders: Any = CHECKIN_ORDERS,
        amplified: bool = True,
    ) -> None:
        super().__init__(neighbouring, observer=observer)
        if method not in RANDOM_CHECKIN_METHODS:
            raise ParameterError(f"Argument 'method' must be one of {RANDOM_CHECKIN_METHODS}, not {method!r}.")
        if (observer == "coalition") != (coalition is not None):
            raise ParameterError("Argument 'coalition' must be given exactly for observer 'coalition'.")
        if coalition is not None and not isinstance(coalition, Coalition):
            raise ParameterError(f"Argument 'coalition' must be a Coalition, not {type(coalition).__name__}.")
        if not isinstance(amplified, bool):
            raise ParameterError(f"Argument 'amplified' must be a bool, not {type(amplified).__name__}.")
        self.method = method
        self.amplified = amplified
        self.citation = _CITATION + _CITE_METHOD[method]
        if method == "rdp" and observer == "analyst" and amplified:
            self.citation += "; analyst: sampling without replacement, Wang, Balle & Kasiviswanathan 2019, Thm 9"
        self._coalition = coalition
        self._orders = np.asarray(check_orders(orders), dtype=np.int64)
        self._rdp = np.zeros(self._orders.shape)

    def unsupported(self, event: Any) -> tuple[Any, str] | None:
        r = _unwrap(event)
        if r is None:
            return event, "not a RandomCheckinEpoch"
        ev = r[0]
        if ev.neighbouring != self.neighbouring:
            return ev, f"neighbouring {ev.neighbouring!r}, the accountant's is {self.neighbouring!r}"
        if self._coalition is not None and self._coalition.min_sum > ev.clients:
            return ev, f"coalition min_sum {self._coalition.min_sum} exceeds clients {ev.clients}"
        if self.method == "pld":
            try:
                _epoch_kind_check(ev, self.observer)
            except ParameterError as exc:
                return ev, str(exc)
        return None

    def _compose(self, event: PrivacyEvent, count: int) -> None:
        r = _unwrap(event)
        assert r is not None  # unsupported() said so
        ev, reps = r
        if self.method == "rdp":
            if self.observer == "analyst" and self.amplified:
                curve = random_checkin_analyst_rdp(ev, self._orders)
            else:
                curve = random_checkin_rdp(ev, self._orders, self._coalition)
            self._rdp = self._rdp + count * reps * curve

    def _flat(self) -> list[tuple[RandomCheckinEpoch, int]]:
        out = []
        for event, count in self.events:
            r = _unwrap(event)
            if r is not None:
                out.append((r[0], r[1] * count))
        return out

    def _pld(self, delta: float) -> RandomCheckinPLD:
        return random_checkin_pld(self._flat(), delta, self.observer, self._coalition)

    def get_epsilon(self, delta: float) -> float:
        if self.method == "pld":
            return self._pld(delta).epsilon
        if not np.any(self._rdp):
            return 0.0
        return float(rdp_to_epsilon(orders=self._orders, rdp=self._rdp, delta=delta)[0])

    def get_delta(self, epsilon: float) -> float:
        eps = check_real("epsilon", epsilon, lo=0.0)
        if self.method == "pld":
            pess = _composed(self._flat(), self.observer, self._coalition)[0]
            return 0.0 if pess is None else float(min(1.0, pess.get_delta_for_epsilon(eps)))
        lo, hi = 1e-300, 1.0 - 1e-12
        if self.get_epsilon(hi) > eps:
            return 1.0
        for _ in range(60):  # bisection on log delta; epsilon(delta) is non-increasing
            mid = math.sqrt(lo * hi)
            if self.get_epsilon(mid) <= eps:
                hi = mid
            else:
                lo = mid
        return hi

    def certificate(self, delta: float) -> Certificate:
        detail: dict[str, Any] = {"epochs": sum(c for _, c in self._flat())}
        if self._coalition is not None:
            detail.update(self._coalition.as_dict())
        if self.method == "pld":
            r = self._pld(delta)
            detail.update(epsilon_lower=r.epsilon_lower, route=r.route)
            return Certificate(
                r.epsilon,
                delta,
                self.observer,
                self.neighbouring,
                "pld",
                True,
                self.citation,
                slack=r.epsilon - r.epsilon_lower,
                detail=detail,
            )
        # the server view's curve (the analyst's by post-processing), or the analyst's amplified by the epoch coin
        detail["route"] = "amplified" if self.observer == "analyst" and self.amplified else "revealed"
        eps, order = (
            (0.0, None) if not np.any(self._rdp) else rdp_to_epsilon(orders=self._orders, rdp=self._rdp, delta=delta)
        )
        return Certificate(
            eps,
            delta,
            self.observer,
            self.neighbouring,
            "rdp",
            True,
            self.citation,
            order=None if order is None else float(order),
            detail=detail,
        )

    def fresh(self) -> Self:
        return type(self)(
            self.neighbouring,
            observer=self.observer,
            method=self.method,
            coalition=self._coalition,
            orders=self._orders,
            amplified=self.amplified,
        )


class _OneMethod(RandomCheckinAccountant):
    """A :class:`RandomCheckinAccountant` fixed to one method (the registry's one class per method)."""

    METHOD = "pld"

    def __init__(self, neighbouring: str = "replace-one", *, method: str | None = None, **options: Any) -> None:
        if method not in (None, self.METHOD):
            raise ParameterError(f"Argument 'method' of {type(self).__name__} must be {self.METHOD!r}, not {method!r}.")
        super().__init__(neighbouring, method=self.METHOD, **options)


class RandomCheckinPldAccountant(_OneMethod):
    """``RandomCheckinAccountant(method="pld")`` (registry name ``"random-checkin-pld"``)."""

    METHOD = "pld"


class RandomCheckinRdpAccountant(_OneMethod):
    """``RandomCheckinAccountant(method="rdp")`` (registry name ``"random-checkin-rdp"``)."""

    METHOD = "rdp"


def _epoch_kind_check(ev: RandomCheckinEpoch, observer: str) -> None:
    """Raise :class:`ParameterError` if the PLD method cannot certify ``ev`` for ``observer``."""
    mech = ev.mechanism
    if not isinstance(mech, (CentralGaussian, GaussianSum)):
        raise ParameterError(f"the PLD method needs CentralGaussian or GaussianSum, not {type(mech).__name__}")
    if isinstance(mech, GaussianSum) and ev.slots != 1:
        raise ParameterError("the PLD method supports slots = 1 for distributed noise")
    if observer == "coalition" and isinstance(mech, CentralGaussian):
        raise ParameterError("the coalition observer applies to distributed noise (k_eff honest shares)")
