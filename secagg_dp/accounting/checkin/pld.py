"""Tight check-in accountant: privacy loss distributions (PLD) with pessimistic discretisation.

Mechanism (Gaussian, clip C = 1, per-client noise N(0, sigma^2), replace-one at the client level, L2
sensitivity of the sum Delta = 2). Proofs: ``docs/accounting/pld.md``.

* ``observer="analyst"`` sees K and the aggregate. K ~ Bin(n, gamma) is data independent and revealed, so the
  round's PLD is the P(K=k)-mixture of per-k PLDs. Given K = k the k participants are a uniform k-subset,
  i.e. the k-client Gaussian sum (std s_k = sigma sqrt(k)) subsampled without replacement at q_k = k/n.
  Zhu, Dong & Wang (2022), Thm 10 (replace-one, without replacement): for alpha >= 1 the hockey-stick
  divergence is at most H_alpha(A_k || B_k) with A_k = q N(Delta, s^2) + (1-q) N(0, s^2), B_k = N(0, s^2);
  for alpha < 1 at most H_alpha(B_k || A_k) (the Gaussian is symmetric under y -> Delta - y). The
  symmetrised PLD (Dong, Roth & Su 2022, Thm 4.2: tradeoff min{f_q, f_q^-1}**) dominates every ordered pair.
* ``observer="server"`` also sees who took part: with probability gamma the target contributes, together
  with K - 1 ~ Bin(n - 1, gamma) others, and the round is the Gaussian pair (N(Delta, s_k^2), N(0, s_k^2));
  otherwise the loss is 0.
* ``observer="coalition"`` (``coalition=Coalition(c, m)``): the server view with the per-k Gaussian at
  k_eff(k) = max(1, min(k, m) - c) honest clients (std s = sigma sqrt(k_eff(k))): the coalition subtracts the
  colluders' inputs and noise and may exclude honest clients down to sums of m clients
  (:mod:`secagg_dp.accounting.checkin.coalition`). k_eff is non-decreasing, so a block's worst pair is at
  k_eff(k_lo), as for the server.

Per round: delta(eps) = sum_k w_k delta_k(eps) + p_out, exact closed forms per component; the binomial mass
outside a window W (a rigorous upper bound p_out from ``log_binom_tail_ub``) is moved to loss +infinity.
Client counts in W are grouped in blocks [k_lo, k_hi] bounded by the block's worst pair (q at k_hi, s at k_lo:
a data-independent post-processing of it gives every pair in the block). The profile is discretised with
Connect-the-Dots (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1), a pessimistic PLD, composed T
times by FFT and converted to (eps, delta) with dp-accounting's arithmetic, repeated here step for step (so that a
query need not import dp-accounting; the tests check the equality). The optimistic value rounds every loss down on
the same grid (a lower estimate of the same computation).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import special

from secagg_dp._parallel import idle_cpus
from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin._record import DetailCertificate, DetailField, coalition_detail, int_pair
from secagg_dp.accounting.checkin.tails import binom_window_edge, log_binom_pmf, log_binom_tail_ub
from secagg_dp.accounting.core.accountant import _UNSET, _field_or_detail
from secagg_dp.errors import ParameterError

__all__ = [
    "PLD_OBSERVERS",
    "PLDCertificate",
    "checkin_round_delta",
    "wor_gaussian_delta",
    "checkin_pld",
    "calibrate_checkin_pld",
    "epsilon_for_delta",
]

PLD_OBSERVERS = ("analyst", "server", "coalition")
_DELTA_SENS = 2.0  # replace-one L2 sensitivity of the sum at clip C = 1
_GRID_POINTS = 10000  # default grid: top / h; the pessimistic-optimistic gap reports the slack
_MAX_POINTS = 10_000_001
_MAX_WINDOW = 2**20  # client counts in the window (its binomial pmf is evaluated at each)


_TAIL_HANDLING = "binomial mass outside the window moved to privacy loss +infinity (counted in delta)"
#: The PLD-specific fields, in ``detail`` (read back as attributes of :class:`PLDCertificate`).
_PLD_DETAIL = (
    "epsilon_optimistic",
    "rounds",
    "sigma",
    "n",
    "gamma",
    "window",
    "blocks",
    "delta_tail",
    "delta_truncation",
    "discretization",
)


class PLDCertificate(DetailCertificate):
    """A :class:`~secagg_dp.accounting.core.accountant.Certificate` of T rounds of Gaussian distributed
    check-in from the round's PLD.

    ``epsilon`` is the certificate (pessimistic discretisation, an upper bound for ``observer``);
    ``epsilon_optimistic`` is the same computation with every loss rounded down (not a certificate; ``slack``
    = epsilon - epsilon_optimistic). ``delta_tail`` = 1 - (1 - p_out)^T is the part of delta spent on client
    counts outside ``window`` (moved to loss +infinity, never dropped); ``delta_truncation`` is dp-accounting's
    FFT tail allowance.

    The one certificate record with the PLD fields kept as before: the constructor takes the former keyword
    fields and stores them in ``detail``, read back as attributes; ``as_dict()`` is the ``"pld"`` layout;
    :func:`dataclasses.replace` works. Equality compares ``detail`` as well.
    """

    def __init__(
        self,
        epsilon: float,
        epsilon_optimistic: Any = _UNSET,
        delta: float = 0.0,
        rounds: Any = _UNSET,
        sigma: Any = _UNSET,
        n: Any = _UNSET,
        gamma: Any = _UNSET,
        observer: str = "analyst",
        window: Any = _UNSET,
        blocks: Any = _UNSET,
        delta_tail: Any = _UNSET,
        delta_truncation: Any = _UNSET,
        discretization: Any = _UNSET,
        method: str = "pld",
        neighbouring: str = "replace-one",
        certificate: bool = True,
        tail_handling: Any = _UNSET,
        colluders: Any = _UNSET,
        min_sum: Any = _UNSET,
        *,
        citation: str = "",
        slack: Any = _UNSET,
        bound: str | None = None,
        order: None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        if observer not in PLD_OBSERVERS:
            raise ParameterError(f"Argument 'observer' must be one of {PLD_OBSERVERS}, not {observer!r}.")
        coalition = coalition_detail(observer, colluders, min_sum, detail)
        given = dict(
            zip(
                _PLD_DETAIL,
                (
                    epsilon_optimistic,
                    rounds,
                    sigma,
                    n,
                    gamma,
                    window,
                    blocks,
                    delta_tail,
                    delta_truncation,
                    discretization,
                ),
                strict=True,
            )
        )
        values = {k: _field_or_detail(k, v, detail) for k, v in given.items()}
        values["tail_handling"] = _field_or_detail("tail_handling", tail_handling, detail, _TAIL_HANDLING)
        values.update(coalition)
        low = values["epsilon_optimistic"]
        finite = math.isfinite(epsilon)
        super().__init__(
            epsilon=epsilon,
            delta=delta,
            observer=observer,
            neighbouring=neighbouring,
            method=method,
            certificate=certificate,
            bound=bound or ("upper" if certificate else "estimate"),
            citation=citation or _PLD_CITATION,
            slack=(epsilon - min(low, epsilon) if finite else math.inf) if slack is _UNSET else slack,
            order=order,
            detail=values,
        )

    epsilon_optimistic = DetailField(
        float, "The same computation with every loss rounded down: a lower estimate, not a certificate."
    )
    sigma = DetailField(float, "The noise multiplier of the Gaussian sum.")
    n = DetailField(int, "The number of clients.")
    gamma = DetailField(float, "The check-in probability.")
    window = DetailField(int_pair, "The client-count window [k_lo, k_hi] the PLD is computed on.")
    blocks = DetailField(int, "The number of client-count blocks of the mixture.")
    delta_tail = DetailField(float, "The part of delta spent on client counts outside the window.")
    delta_truncation = DetailField(float, "dp-accounting's FFT tail allowance.")
    discretization = DetailField(float, "The step h of the privacy-loss grid.")
    tail_handling = DetailField(str, "How the client counts outside the window are accounted.")

    def as_dict(self, *, schema: str = "pld") -> dict[str, Any]:
        """JSON-ready record: ``Certificate.as_dict`` in the ``"pld"`` layout by default (the keys
        ``secagg-dp account checkin --json`` has always printed)."""
        return super().as_dict(schema=schema)


_PLD_CITATION = (
    "Zhu, Dong & Wang 2022, Thm 10 (dominating pair of the subsampled Gaussian); Connect-the-Dots, "
    "Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1; proofs in docs/accounting/pld.md"
)


@dataclass(frozen=True)
class _Components:
    """Mixture components: weight w, subsampling rate q (1 for the server view) and noise std s per block."""

    w: np.ndarray
    q: np.ndarray
    s: np.ndarray
    w_null: float  # weight of identical outputs (loss 0)
    p_out: float  # rigorous upper bound on the mass outside the window (moved to +infinity)
    window: tuple[int, int]


def _edge(n: int, p: float, log_budget: float, lower: bool) -> int:
    """Outermost k with log P(K < k) (lower) or log P(K > k) (upper) <= log_budget (upper bounds on them)."""
    return binom_window_edge(n, p, log_budget, lower)


def _blocks(a: int, b: int, rel: float) -> tuple[np.ndarray, np.ndarray]:
    """Cover [a, b] by consecutive blocks with k_hi <= max(k_lo, k_lo (1 + rel))."""
    los, his = [], []
    k = a
    while k <= b:
        h = min(b, max(k, math.floor(k * (1.0 + rel))))
        los.append(k)
        his.append(h)
        k = h + 1
    return np.array(los, dtype=np.float64), np.array(his, dtype=np.float64)


_CoalitionKey = tuple[int, int] | None  # (colluders, min_sum) for observer "coalition", else None


def _components(
    n: int,
    gamma: float,
    sigma: float,
    observer: str,
    tail_budget: float,
    block_rel: float,
    coalition: _CoalitionKey = None,
) -> _Components:
    """Window, block weights and worst-case pairs of one round (weights from the binomial pmf, exact).

    Everything but the noise std s = sigma sqrt(k_lo) is independent of sigma and kept across calls
    (a calibration asks for the same n, gamma and budget at every sigma it tries)."""
    w, q, root_k, w_null, p_out, window = _sigma_free_components(n, gamma, observer, tail_budget, block_rel, coalition)
    return _Components(w, q, sigma * root_k, w_null, p_out, window)


@functools.lru_cache(maxsize=16)
def _sigma_free_components(
    n: int, gamma: float, observer: str, tail_budget: float, block_rel: float, coalition: _CoalitionKey = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float, tuple[int, int]]:
    """(w, q, sqrt(k_lo), w_null, p_out, window) of :func:`_components`; the arrays are read-only. For the
    coalition, sqrt(k_eff(k_lo)) with k_eff(k) = max(1, min(k, m) - c), ``coalition`` = (c, m)."""
    if observer == "analyst":
        m, shift, lead = n, 0, 1.0  # K ~ Bin(n, gamma), k = K
    else:
        m, shift, lead = n - 1, 1, gamma  # target in w.p. gamma; k = 1 + Bin(n - 1, gamma)
    log_b = math.log(tail_budget / 2.0)
    if gamma == 1.0 or m == 0:
        a = b = m if gamma == 1.0 else 0
        p_out = 0.0
    else:
        a, b = _edge(m, gamma, log_b, True), _edge(m, gamma, log_b, False)
        parts = []
        if a > 0:
            parts.append(float(log_binom_tail_ub(m, np.array([0.0]), np.array([a - 1.0]), gamma)[0]))
        if b < m:
            parts.append(float(log_binom_tail_ub(m, np.array([b + 1.0]), np.array([float(m)]), gamma)[0]))
        p_out = lead * sum(math.exp(x) for x in parts)
    w_null = 1.0 - lead
    if b - a + 1 > _MAX_WINDOW:
        raise ParameterError(
            f"Arguments 'n' = {n} and 'gamma' = {gamma!r} put {b - a + 1} client counts in the PLD accountant's "
            f"window of Bin(n, gamma); supported up to {_MAX_WINDOW}. To fix, use a smaller n or gamma."
        )
    k_lo, k_hi = _blocks(a, b, block_rel)
    if m == 0 or gamma == 1.0:
        pmf = np.ones(1)
    else:
        pmf = np.exp(log_binom_pmf(m, np.arange(a, b + 1, dtype=np.float64), gamma))
    csum = np.concatenate(([0.0], np.cumsum(pmf)))
    w = lead * (csum[(k_hi - a + 1).astype(int)] - csum[(k_lo - a).astype(int)])
    k_lo, k_hi = k_lo + shift, k_hi + shift
    if observer == "analyst" and k_lo[0] == 0:  # K = 0: nobody's data is used, loss 0
        w_null += w[0] if k_hi[0] == 0 else 0.0
        if k_hi[0] == 0:
            w, k_lo, k_hi = w[1:], k_lo[1:], k_hi[1:]
        else:  # block [0, h]: the k = 0 pair is dominated by the block's worst pair; keep it in the block
            k_lo = k_lo.copy()
            k_lo[0] = 1.0
    q = k_hi / n if observer == "analyst" else np.ones_like(k_hi)
    if observer == "coalition" and coalition is not None:  # _check required it
        c, m_sum = coalition
        root_k = np.sqrt(np.maximum(1.0, np.minimum(k_lo, float(m_sum)) - c))
    else:
        root_k = np.sqrt(k_lo)
    for arr in (w, q, root_k):
        arr.setflags(write=False)
    return w, q, root_k, w_null, p_out, (a + shift, b + shift)


def _tails(c: _Components, eps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weighted sums over components, for eps >= 0, of A_k(L > eps) and B_k(L > eps).

    L(y) = log(1 - q + q exp((Delta y - Delta^2/2)/s^2)) is increasing in y, so L > eps iff
    y > y_eps = Delta/2 + (s^2/Delta) log1p(expm1(eps)/q); A(y > t) = q Phi((Delta - t)/s) + (1-q) Phi(-t/s).

    Components are taken 32 at a time; the chunks' products may be evaluated on worker threads
    (:func:`_chunk_workers`), but they are added in chunk order, so the sums are the same floats either way."""
    sa = np.zeros(eps.shape)
    sb = np.zeros(eps.shape)
    em1 = np.expm1(eps)[None, :]
    one_rate = c.q.size > 0 and bool(np.all(c.q == c.q[0]))  # the server view: q = 1 for every component
    shared = np.log1p(em1 / c.q[0]) if one_rate else None  # then one row serves them all (same numbers)
    err = np.geterr()

    def chunk(i: int) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(**err):  # numpy's error state is per thread: the caller's applies in the workers too
            q, s = c.q[i : i + _TAIL_CHUNK, None], c.s[i : i + _TAIL_CHUNK, None]
            y = _DELTA_SENS / 2.0 + (s * s / _DELTA_SENS) * (shared if shared is not None else np.log1p(em1 / q))
            tb = special.ndtr(-y / s)
            ta = q * special.ndtr((_DELTA_SENS - y) / s) + (1.0 - q) * tb
            w = c.w[i : i + _TAIL_CHUNK]
            return w @ ta, w @ tb

    starts = range(0, c.w.size, _TAIL_CHUNK)
    workers = _chunk_workers(len(starts), c.w.size * eps.size)
    if workers <= 1:
        parts: Iterator[tuple[np.ndarray, np.ndarray]] = map(chunk, starts)
        for pa, pb in parts:
            sa += pa
            sb += pb
        return sa, sb
    from concurrent.futures import ThreadPoolExecutor  # lazy: only a large job pays for the import

    with ThreadPoolExecutor(max_workers=workers) as pool:  # numpy's kernels release the GIL
        for pa, pb in pool.map(chunk, starts):  # in chunk order
            sa += pa
            sb += pb
    return sa, sb


_TAIL_CHUNK = 32  # components per chunk (fixed: the sums' rounding follows the chunking)
_PARALLEL_MIN_WORK = 200_000  # component x grid evaluations below which threads cost more than they save
_MAX_WORKERS = 4


def _chunk_workers(chunks: int, work: int) -> int:
    """Worker threads for :func:`_tails` and :func:`_discretised`: one per idle CPU
    (:func:`secagg_dp._parallel.idle_cpus`, at most ``_MAX_WORKERS``); one for small jobs."""
    if chunks < 2 or work < _PARALLEL_MIN_WORK:
        return 1
    return idle_cpus(min(_MAX_WORKERS, chunks))


def wor_gaussian_delta(q: float, std: float, epsilons: np.ndarray) -> np.ndarray:
    """delta(eps) of the symmetrised dominating pair of one k: the Gaussian sum (std ``std``, sensitivity 2)
    subsampled without replacement at rate q, replace-one (Zhu, Dong & Wang 2022, Thm 10), any real eps."""
    q = check_probability("q", q, allow_zero=False)
    std = check_real("std", std, lo=0.0, lo_open=True)
    c = _Components(np.ones(1), np.array([q]), np.array([std]), 0.0, 0.0, (0, 0))
    return _profile_and_survival(c, np.asarray(epsilons, dtype=np.float64))[0]


def _grid_top(c: _Components, budget: float) -> float:
    """eps beyond which every component's delta is <= budget: L(y*) with A(y > y*) <= budget."""
    z = -special.ndtri(budget)
    y = _DELTA_SENS + c.s * z
    lz = (_DELTA_SENS * y - _DELTA_SENS**2 / 2.0) / c.s**2
    return float(np.max(np.log1p(c.q * np.expm1(lz)))) if c.q.size else 0.0


def checkin_round_delta(
    n: int,
    gamma: float,
    sigma: float,
    epsilons: np.ndarray,
    *,
    observer: str = "analyst",
    tail_budget: float = 1e-16,
    block_rel: float = 1e-4,
    coalition: Any = None,
) -> np.ndarray:
    """delta(eps) of ONE round's symmetrised dominating PLD (upper bound on every ordered pair), any real eps.

    eps >= 0: sum_k w_k [A_k(L>eps) - e^eps B_k(L>eps)] + p_out; eps < 0 by symmetry of each component,
    delta_k(eps) = 1 - e^eps + e^eps delta_k(-eps) (Zhu, Dong & Wang 2022, Thm 10; Dong, Roth & Su 2022, Thm 4.2).
    """
    n, gamma, sigma, observer = _check(n, gamma, sigma, observer)
    key = _coalition_key(observer, coalition, n)
    c = _components(n, gamma, sigma, observer, tail_budget, block_rel, key)
    return _profile_and_survival(c, np.asarray(epsilons, dtype=np.float64))[0]


class _TailMemo:
    """Component tails (A(L > eps), B(L > eps)) already evaluated in one certificate computation, by eps."""

    def __init__(self) -> None:
        self.eps: np.ndarray = np.empty(0)
        self.sa: np.ndarray = np.empty(0)
        self.sb: np.ndarray = np.empty(0)

    def tails(self, c: _Components, grid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:func:`_tails` on the sorted ``grid``, evaluating only the points not seen before."""
        pos = np.minimum(np.searchsorted(self.eps, grid), max(self.eps.size - 1, 0))
        known = (self.eps[pos] == grid) if self.eps.size else np.zeros(grid.shape, dtype=bool)
        sa, sb = np.empty(grid.shape), np.empty(grid.shape)
        sa[known], sb[known] = self.sa[pos[known]], self.sb[pos[known]]
        if not np.all(known):
            new_a, new_b = _tails(c, grid[~known])
            sa[~known], sb[~known] = new_a, new_b
        self.eps, self.sa, self.sb = grid, sa, sb
        return sa, sb


def _profile_and_survival(
    c: _Components, eps: np.ndarray, memo: _TailMemo | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """delta(eps) and omega(loss >= eps) of the symmetrised round PLD (p_out at +infinity), any real eps.

    Per component delta_k(eps) = A_k(L > eps) - e^eps B_k(L > eps) for eps >= 0 and, by symmetry,
    1 - e^eps + e^eps delta_k(-eps) for eps < 0; the null component (loss 0) has delta = (1 - e^eps)_+.
    omega(loss >= eps) = A(L >= eps) for eps > 0; for eps <= 0 all mass but the mirrored B(L > -eps)."""
    a = np.abs(eps)
    grid, inv = np.unique(a, return_inverse=True)  # symmetric grids: evaluate each |eps| once
    sa, sb = (x[inv] for x in (memo.tails(c, grid) if memo is not None else _tails(c, grid)))
    win = float(np.sum(c.w)) + c.w_null
    dpos = np.maximum(sa - np.exp(a) * sb, 0.0)
    delta = np.where(eps >= 0, dpos, win * (-np.expm1(eps)) + np.exp(eps) * dpos) + c.p_out
    surv = np.where(eps > 0, sa, win - sb) + c.p_out
    return delta, surv


def _check(n: int, gamma: float, sigma: float, observer: str) -> tuple[int, float, float, str]:
    n = check_int("n", n, lo=1)
    gamma = check_probability("gamma", gamma, allow_zero=False)
    sigma = check_real("sigma", sigma, lo=0.0, lo_open=True)
    if observer not in PLD_OBSERVERS:
        raise ParameterError(f"Argument 'observer' must be one of {PLD_OBSERVERS}, not {observer!r}.")
    return n, gamma, sigma, observer


def _coalition_key(observer: str, coalition: Any, n: int) -> _CoalitionKey:
    """(colluders, min_sum) of ``coalition`` (a :class:`~secagg_dp.accounting.checkin.coalition.Coalition`),
    required for and only for observer ``"coalition"``."""
    if observer != "coalition":
        if coalition is not None:
            raise ParameterError(f"Argument 'coalition' is for observer 'coalition' only, not {observer!r}.")
        return None
    if coalition is None:
        raise ParameterError(
            "Argument 'coalition' is required for observer 'coalition': pass Coalition(colluders, min_sum)."
        )
    from secagg_dp.accounting.checkin.coalition import _check_coalition

    co = _check_coalition(coalition, n)
    return co.colluders, co.min_sum


_MAX_PLD_ROUNDS = 10**6
_MAX_COMPOSED_POINTS = 2e7  # ~0.3 GB of complex128 in the FFT
_MAX_GRID_TOP = 1e3  # largest privacy loss the grid covers; beyond it the noise is negligible anyway


def _setup(
    n: int,
    gamma: float,
    sigma: float,
    rounds: int,
    delta: float,
    observer: str,
    tail_fraction: float,
    block_rel: float,
    coalition: _CoalitionKey = None,
) -> tuple[_Components, float, float]:
    """Components, grid top and FFT truncation mass of :func:`checkin_pld` (arguments already checked)."""
    budget = tail_fraction * delta / (2.0 * rounds)
    with np.errstate(all="ignore"):
        c = _components(n, gamma, sigma, observer, budget, block_rel, coalition)
        top = _grid_top(c, budget)
    if not (math.isfinite(top) and top <= _MAX_GRID_TOP):
        raise ParameterError(
            f"Argument 'sigma' = {sigma!r} puts the privacy loss out of the PLD grid's range (top {top:.3g}; "
            f"supported up to {_MAX_GRID_TOP:g}): the noise is too small for a discretised PLD. To fix, use "
            "the RDP accountant (method 'rdp'), which gives a finite (or infinite) certificate here."
        )
    return c, max(top, 1e-6), min(1e-15, 1e-3 * delta)


_COARSE_POINTS = 500


def _estimated_epsilon(
    n: int,
    gamma: float,
    sigma: float,
    rounds: int,
    delta: float,
    observer: str,
    target: float,
    coalition: _CoalitionKey = None,
) -> float:
    """An estimate (not a certificate) of :func:`checkin_pld`'s epsilon, for placing the first certificates.

    The pessimistic value e(h) on a grid of h = top / 500; unless that is more than a factor 2 from ``target`` (only the
    side of the target matters there), also on h/2 and h/4, extrapolated to h -> 0 by Richardson with the order p fitted
    from the three: e(h) ~ e0 + a h^p gives e0 = e(h/4) - d2 / (d1/d2 - 1), d1 = e(h) - e(h/2), d2 = e(h/2) - e(h/4).
    The certificate is the pessimistic value on a grid 20-320x finer than h, close to e0 (an observation, not a bound:
    on the 28 settings we tried, both observers, the crossing of e0 with the target was within 0.05 % of the
    certificate's in sigma), where the geometric mean of the pessimistic and optimistic values on the coarse grid (the
    estimate used before) was up to 40 % off. Where the three values do not fall geometrically (d1 > d2 > 0), e(h/4) is
    returned."""
    c, top, trunc = _setup(n, gamma, sigma, rounds, delta, observer, 1e-3, 1e-4, coalition)
    e: list[float] = []
    with np.errstate(all="ignore"):
        for m in (1, 2, 4):
            e.append(_discretised(c, top, top / (_COARSE_POINTS * m), rounds, delta, trunc)[0])
            if m == 1 and not 0.5 * target <= e[0] <= 2.0 * target:
                return e[0]
    d1, d2 = e[0] - e[1], e[1] - e[2]
    if all(math.isfinite(x) for x in e) and d1 > d2 > 0.0:
        return max(e[2] - d2 / (d1 / d2 - 1.0), 0.0)
    return e[2]


def checkin_pld(
    n: int,
    gamma: float,
    sigma: float,
    rounds: int,
    delta: float,
    *,
    observer: str = "analyst",
    discretization: float | None = None,
    tail_fraction: float = 1e-3,
    block_rel: float = 1e-4,
    coalition: Any = None,
) -> PLDCertificate:
    """Certified epsilon (an upper bound) of T rounds of Gaussian distributed check-in, replace-one.

    ``coalition`` (a :class:`~secagg_dp.accounting.checkin.coalition.Coalition`) is required for, and only for,
    ``observer="coalition"``.

    ``discretization`` h of the loss grid (default: top of the grid / 10000, halved up to 4 times while the
    optimistic value is more than 5% below the certificate). The mass outside
    the client-count window and above the grid top each get ``tail_fraction`` * delta / (2T) per round.
    """
    n, gamma, sigma, observer = _check(n, gamma, sigma, observer)
    key = _coalition_key(observer, coalition, n)
    rounds = check_int("rounds", rounds, lo=1)
    delta = check_real("delta", delta, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    tail_fraction = check_real("tail_fraction", tail_fraction, lo=0.0, hi=0.5, lo_open=True)
    block_rel = check_real("block_rel", block_rel, lo=0.0)
    if rounds > _MAX_PLD_ROUNDS:
        raise ParameterError(
            f"Argument 'rounds' must be at most {_MAX_PLD_ROUNDS} for the PLD accountant (the composed loss grid "
            f"grows with T), not {rounds}. To fix, use the RDP accountant (method 'rdp')."
        )
    c, top, trunc = _setup(n, gamma, sigma, rounds, delta, observer, tail_fraction, block_rel, key)
    # extreme noise levels overflow inside the loss formulas; the result is checked for validity below
    with np.errstate(all="ignore"):
        if discretization is not None:
            h = check_real("discretization", discretization, lo=0.0, lo_open=True)
            eps_hi, eps_lo = _discretised(c, top, h, rounds, delta, trunc)
        else:  # default grid, refined (at most 4 halvings) while the slack exceeds 5% of the certificate
            h = top / _GRID_POINTS
            memo = _TailMemo()  # a halved grid holds the coarser one's points: their tails are reused
            eps_hi, eps_lo = _discretised(c, top, h, rounds, delta, trunc, memo)
            for _ in range(4):
                if eps_hi - eps_lo <= 0.05 * eps_hi or 4.0 * top / h + 3 > _MAX_POINTS:
                    break
                h /= 2.0
                eps_hi, eps_lo = _discretised(c, top, h, rounds, delta, trunc, memo)
    if not (math.isfinite(eps_hi) or eps_hi == math.inf) or math.isnan(eps_lo) or eps_hi < 0:
        raise ParameterError(
            f"The PLD computation is numerically unusable at sigma={sigma!r}, n={n}, gamma={gamma!r} "
            f"(got {eps_hi!r}). To fix, use the RDP accountant (method 'rdp')."
        )
    return PLDCertificate(
        epsilon=eps_hi,
        epsilon_optimistic=eps_lo,
        delta=delta,
        rounds=rounds,
        sigma=sigma,
        n=n,
        gamma=gamma,
        observer=observer,
        window=c.window,
        blocks=int(c.w.size),
        delta_tail=-math.expm1(rounds * math.log1p(-c.p_out)),
        delta_truncation=trunc,
        discretization=h,
        colluders=None if key is None else key[0],
        min_sum=None if key is None else key[1],
    )


def _discretised(
    c: _Components, top: float, h: float, rounds: int, delta: float, trunc: float, memo: _TailMemo | None = None
) -> tuple[float, float]:
    """(pessimistic, optimistic) epsilon of T rounds on the grid i h, |i| <= top / h (see module docstring).

    ``memo`` keeps the component tails already evaluated on a coarser grid of the same run (a halved grid
    contains every point of the coarser one, and each point's tails depend on that point alone)."""
    m = int(math.ceil(top / h))
    if 2 * m + 1 > _MAX_POINTS:
        raise ParameterError(
            f"Argument 'discretization' gives {2 * m + 1} grid points (more than {_MAX_POINTS}), not {h!r}. To fix, "
            "pass a larger discretization."
        )
    idx = np.arange(-m, m + 1)
    deltas, surv = _profile_and_survival(c, idx * h, memo)
    pess, pess_inf = _connect_dots_pessimistic(
        h,
        idx,
        np.maximum.accumulate(np.clip(deltas, 0.0, 1.0)[::-1])[::-1],  # monotone by raising: pessimistic
    )
    surv = np.minimum.accumulate(np.clip(surv, 0.0, 1.0))
    probs = np.maximum(surv - np.append(surv[1:], c.p_out), 0.0)  # [eps_i, eps_{i+1}) -> eps_i; top: [eps_m, inf)
    if rounds > 1 and _chunk_workers(2, probs.size * 32) > 1:  # two independent compositions: one on a worker
        from concurrent.futures import ThreadPoolExecutor  # lazy: only a large job pays for the import

        err = np.geterr()

        def optimistic() -> float:
            with np.errstate(**err):  # numpy's error state is per thread: the caller's applies here too
                return _epsilon(-m, probs, c.p_out, h, rounds, delta, trunc)

        with ThreadPoolExecutor(max_workers=1) as pool:
            future = pool.submit(optimistic)
            eps_hi = _epsilon(-m, pess, pess_inf, h, rounds, delta, trunc)
            eps_lo = future.result()
    else:
        eps_hi = _epsilon(-m, pess, pess_inf, h, rounds, delta, trunc)
        eps_lo = _epsilon(-m, probs, c.p_out, h, rounds, delta, trunc)
    return eps_hi, min(eps_lo, eps_hi)


def _connect_dots_pessimistic(h: float, idx: np.ndarray, deltas: np.ndarray) -> tuple[np.ndarray, float]:
    """Pessimistic Connect-the-Dots pmf on the consecutive losses ``idx`` h and its mass at +infinity
    (Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022, Alg. 1): loss eps_i gets
    (delta_i − delta_{i−1}) / (e^{eps_{i−1} − eps_i} − 1) + (delta_{i+1} − delta_i) / (e^{eps_{i+1} − eps_i} − 1)
    (delta_0 = 1, the last term 0 at the top), +infinity gets delta_n. The arithmetic of dp-accounting's
    ``create_pmf_pessimistic_connect_dots`` step for step (``tests/accounting/checkin/test_pld.py`` checks the
    equality); done here so that a query does not import dp-accounting (about a second of scipy modules)."""
    deltas = np.minimum.accumulate(np.asarray(deltas, dtype=np.float64))
    eps_diffs = np.diff(idx) * h
    delta_diffs = np.diff(deltas)
    v1 = np.append(1 - deltas[0], delta_diffs / np.expm1(-eps_diffs))
    v2 = np.append(delta_diffs / np.expm1(eps_diffs), 0.0)
    probs: np.ndarray = np.maximum(0, v1 + v2)
    return probs, float(deltas[-1])


_CHERNOFF_ORDERS = np.concatenate((np.arange(-20, 0), np.arange(1, 21)))


def _self_convolve_bounds(p: np.ndarray, rounds: int, trunc: float) -> tuple[int, int]:
    """Indices [lo, hi] of the T-fold self-convolution of ``p`` outside which at most ``trunc`` mass lies,
    by Chernoff bounds at 40 orders (dp-accounting's ``compute_self_convolve_bounds``, whose arithmetic this
    repeats)."""
    hi = (len(p) - 1) * rounds
    lo = 0
    if trunc == 0:
        return lo, hi
    orders = _CHERNOFF_ORDERS / len(p)
    ar = np.arange(len(p))
    zero = p == 0
    for order in orders:
        bound = (rounds * _logsumexp_weighted(ar * order, p, zero) + math.log(2 / trunc)) / order
        if not math.isfinite(bound):
            continue
        if order > 0:
            hi = min(hi, math.ceil(bound))
        if order < 0:
            lo = max(lo, math.floor(bound))
    return lo, hi


def _logsumexp_weighted(a: np.ndarray, b: np.ndarray, b_zero: np.ndarray) -> float:
    """log sum_i b_i e^(a_i) for 1-D float arrays, ``b_zero`` = (b == 0): the arithmetic of
    ``scipy.special.logsumexp(a, b=b)`` (SciPy 1.17, real 1-D input) step for step, so the value is the same
    float (``tests/accounting/checkin/test_pld.py`` checks the equality), without its array-API dispatch (about
    0.5 ms a call; a calibration makes about a thousand). The largest term is factored out and added back as
    log1p(rest / largest) + log(largest weight) + largest exponent; where that is not finite, the direct
    log(sum b e^a) (computed only then)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        a0, a = a, a.astype(np.float64, copy=True)
        a[b_zero] = -np.inf
        a_max = np.max(a, keepdims=True)
        i_max = a == a_max
        a[i_max] = -np.inf
        m = np.sum(b * i_max.astype(np.float64), keepdims=True)
        s = np.sum(b * np.exp(a - a_max), keepdims=True)
        s = np.where(s == 0, s, s / m)
        sgn = np.sign(s + 1) * np.sign(m)
        s = np.where(s < -1, -s - 2, s)
        out = np.log1p(s) + np.log(np.abs(m)) + a_max
        out[sgn < 0] = np.nan
        if not np.isfinite(out[0]):
            out = np.log(np.sum(b * np.exp(a0), keepdims=True))
    return float(out[0])


def _epsilon(
    lower: int, probs: np.ndarray, inf_mass: float, h: float, rounds: int, delta: float, trunc: float
) -> float:
    """T-fold composition by FFT and the smallest eps >= 0 with delta(eps) <= ``delta``, for the pmf ``probs``
    on the losses (lower + i) h with ``inf_mass`` at +infinity.

    The composition is dp-accounting's ``DensePLDPmf.self_compose`` step for step (Chernoff truncation bounds,
    one FFT, the truncated tails counted at +infinity); the conversion its ``get_epsilon_for_delta``,
    vectorised (:func:`epsilon_for_delta`); ``tests/accounting/checkin/test_pld.py`` checks both equalities."""
    p = np.asarray(probs, dtype=np.float64)
    if rounds > 1:
        lo, hi = _self_convolve_bounds(p, rounds, trunc)
        width = max(hi - lo + 1, p.size)
        if width > _MAX_COMPOSED_POINTS:
            raise ParameterError(
                f"Argument 'rounds' = {rounds} needs a composed privacy-loss grid of {width:.3g} points "
                f"(limit {_MAX_COMPOSED_POINTS:g}). To fix, use the RDP accountant (method 'rdp')."
            )
        from scipy import fft  # lazy: keeps `secagg-dp --help` fast

        out_len = hi - lo + 1
        fast_len = fft.next_fast_len(max(out_len, p.size))
        conv = np.real(fft.ifft(fft.fft(p, fast_len) ** rounds))
        p = np.array(np.roll(conv, -lo)[:out_len])
        lower = lower * rounds + lo
        inf_mass = trunc - math.expm1(rounds * math.log1p(-inf_mass))
    losses = (np.arange(p.size) + lower) * h
    return epsilon_for_delta(losses, p, inf_mass, delta)


def epsilon_for_delta(losses: np.ndarray, probs: np.ndarray, infinity_mass: float, delta: float) -> float:
    """Smallest eps >= 0 with delta(eps) = inf_mass + sum_{l > eps} p_l (1 - e^(eps - l)) <= delta.

    On (l_j, l_{j+1}] delta(eps) = U_j - e^eps V_j with U_j = inf_mass + sum_{i > j} p_i and
    V_j = sum_{i > j} p_i e^(-l_i); the answer solves U_j - e^eps V_j = delta on the last such interval where
    delta(l_j) > delta (as dp-accounting's ``get_epsilon_for_delta``). ``losses`` ascending."""
    if infinity_mass > delta:
        return math.inf
    p = np.maximum(probs, 0.0)[::-1]
    l_rev = np.asarray(losses, dtype=np.float64)[::-1]
    u = infinity_mass + np.concatenate(([0.0], np.cumsum(p)))  # mass above the j-th largest loss
    v = np.concatenate(([0.0], np.cumsum(p * np.exp(-l_rev))))
    # delta just at loss l (exclusive of l itself): u[j] - e^l v[j] for the j-th largest loss
    d_at = u[:-1] - np.exp(l_rev) * v[:-1]
    over = np.nonzero(d_at > delta)[0]
    j = over[0] if over.size else u.size - 1  # first (largest) loss where delta exceeds the target
    if v[j] <= 0.0:
        return max(float(l_rev[j - 1]) if j > 0 else 0.0, 0.0)  # dp-accounting's underflow case, rounded up
    if u[j] <= v[j] + delta and j == u.size - 1:
        return 0.0
    return max(math.log((u[j] - delta) / v[j]), 0.0)


def _log_search(
    f: Callable[[float], float],
    t: float,
    x0: float,
    width: float,
    x_min: float,
    x_max: float,
    slope: float,
    min_step: float,
) -> tuple[float, float, list[tuple[float, float]]]:
    """Bracket the crossing of a non-increasing f (log epsilon against x = log sigma) with the level t.

    Returns (lo, hi, points): f(hi) <= t < f(lo) at evaluated points, hi − lo <= ``width`` (lo = −inf when f(x_min) <=
    t, hi = +inf when f(x_max) > t). Unbracketed, it steps outward to just past the secant estimate (at least
    ``min_step``, at most 8x in sigma; ``slope`` stands in while fewer than two finite points exist), or 0.999 ``width``
    when the estimate is within one ``width``. Bracketed, the point is one ``width`` from the bracket's end when the
    secant estimate lies within ``width`` of it (so that the bracket closes if the estimate is right), else the estimate
    moved ``width``/2 toward the farther end, or the midpoint after two steps that each kept more than half the
    bracket."""
    pts: list[tuple[float, float]] = []
    lo, hi = -math.inf, math.inf
    half = 0.5 * width
    x, slow, before = min(max(x0, x_min), x_max), 0, math.inf
    for _ in range(200):
        fx = f(x)
        pts.append((x, fx))
        if fx <= t:
            hi = min(hi, x)
        else:
            lo = max(lo, x)
        if hi - lo <= width or hi <= x_min or lo >= x_max:
            break
        slow = slow + 1 if hi - lo > 0.5 * before else 0
        before = hi - lo
        fin = sorted((abs(py - t), px, py) for px, py in pts if math.isfinite(py))
        g: float | None = None
        if len(fin) >= 2 and fin[0][2] != fin[1][2] and fin[0][1] != fin[1][1]:
            s_ = (fin[1][2] - fin[0][2]) / (fin[1][1] - fin[0][1])
            if s_ < 0:
                g = fin[0][1] + (t - fin[0][2]) / s_
        if g is None and fin:
            g = fin[0][1] + (t - fin[0][2]) / slope
        if math.isinf(lo) or math.isinf(hi):  # unbracketed: go up (no feasible point yet) or down
            up = math.isinf(hi)
            base = lo if up else hi
            step = max(min_step, math.log(2.0)) if g is None else min_step
            if g is not None and (g - base) * (1 if up else -1) > 0:
                dist = abs(g - base)
                # an estimate within one width: a point 0.999 width away closes the bracket if it holds
                step = 0.999 * width if dist <= width else min(max(dist + half, min_step), math.log(8.0))
            x = min(max(base + step if up else base - step, x_min), x_max)
            continue
        if slow >= 2 or g is None or not lo < g < hi:
            g = 0.5 * (lo + hi)
        if g - lo <= width:  # the estimate is next to lo: a point one width above lo closes the bracket
            x = lo + 0.999 * width
        elif hi - g <= width:  # likewise next to hi
            x = hi - 0.999 * width
        else:  # just past the estimate, toward the farther end
            x = g + half if hi - g >= g - lo else g - half
    return lo, hi, pts


def calibrate_checkin_pld(
    n: int,
    gamma: float,
    rounds: int,
    delta: float,
    target_epsilon: float,
    *,
    observer: str = "analyst",
    sigma_range: tuple[float, float] = (1e-2, 1e4),
    rel_tol: float = 1e-3,
    progress: Callable[[str, int, float, float], None] | None = None,
    coalition: Any = None,
) -> tuple[float, PLDCertificate]:
    """Smallest sigma (within relative ``rel_tol``, rounded up) whose PLD certificate is <= ``target_epsilon``.

    Returns (sigma, certificate): ``certificate`` is :func:`checkin_pld` at sigma, its epsilon <= target, and a
    certificate above the target was computed at a sigma' >= sigma / (1 + ``rel_tol``), unless sigma is the
    bottom of ``sigma_range`` (epsilon is non-increasing in sigma: more noise is post-processing). Two searches
    on log sigma against log epsilon, where the curve is nearly straight (:func:`_log_search`): first on a
    cheap estimate (not a certificate; to 2 %: coarse grids extrapolated to a vanishing grid step, see
    :func:`_estimated_epsilon`), then on certificates, the first just above the estimate's crossing and the
    second one step below, which closes the bracket whenever the estimate is within ``rel_tol``/2 (on
    every setting we tried: two certificates). ``progress(stage, step, sigma, epsilon)`` is called after
    each evaluation (stage ``"estimate"`` or ``"certificate"``). ``coalition`` as in :func:`checkin_pld`."""
    target_epsilon = check_real("target_epsilon", target_epsilon, lo=0.0, lo_open=True)
    rel_tol = check_real("rel_tol", rel_tol, lo=0.0, lo_open=True)
    n, gamma, _, observer = _check(n, gamma, 1.0, observer)
    key = _coalition_key(observer, coalition, n)
    s_min, s_max = sigma_range
    x_min, x_max = math.log(s_min), math.log(s_max)
    t = math.log(target_epsilon)
    steps = [0]

    def log_eps(e: float) -> float:
        return math.log(e) if 0.0 < e < math.inf else (math.inf if e > 0.0 else -math.inf)

    def estimate(x: float) -> float:
        try:
            e = _estimated_epsilon(n, gamma, math.exp(x), rounds, delta, observer, target_epsilon, key)
        except ParameterError:  # too little noise for the loss grid: far above any target
            e = math.inf
        steps[0] += 1
        if progress is not None:
            progress("estimate", steps[0], math.exp(x), e)
        return log_eps(e)

    certs: dict[float, PLDCertificate] = {}

    def certify(x: float) -> float:
        c = checkin_pld(n, gamma, math.exp(x), rounds, delta, observer=observer, coalition=coalition)
        certs[x] = c
        steps[0] += 1
        if progress is not None:
            progress("certificate", steps[0], math.exp(x), c.epsilon)
        return log_eps(c.epsilon)

    def line(pts: list[tuple[float, float]], lo: float, hi: float) -> tuple[float, float]:
        """(crossing estimate, slope) from the two finite points nearest the target."""
        fin = sorted((abs(py - t), px, py) for px, py in pts if math.isfinite(py))
        slope = -1.0
        if len(fin) >= 2 and fin[0][1] != fin[1][1] and fin[0][2] != fin[1][2]:
            slope = min((fin[1][2] - fin[0][2]) / (fin[1][1] - fin[0][1]), -1e-3)
        if not (math.isfinite(lo) and math.isfinite(hi)):
            return (hi if math.isfinite(hi) else lo), slope
        if fin:
            return min(max(fin[0][1] + (t - fin[0][2]) / slope, lo), hi), slope
        return 0.5 * (lo + hi), slope

    x0 = min(max(0.0, x_min), x_max)
    lo, hi, pts = _log_search(estimate, t, x0, math.log1p(0.02), x_min, x_max, -1.0, math.log(2.0))
    x_est, slope = line(pts, lo, hi)
    width = math.log1p(rel_tol)
    # the first certificate just above the estimate's crossing (where the certificate's crossing lies when the
    # estimate holds), the next 0.999 width below it
    lo, hi, _ = _log_search(certify, t, x_est + 0.499 * width, width, x_min, x_max, slope, width)
    if math.isinf(hi):
        raise ParameterError(
            f"Argument 'target_epsilon' cannot be met with sigma <= {s_max:g} (epsilon there is "
            f"{certs[x_max].epsilon:.6g}), not {target_epsilon!r}."
        )
    return math.exp(hi), certs[hi]
