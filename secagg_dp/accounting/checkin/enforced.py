"""The k-client base mechanism with add-then-remove noise enforcement (:mod:`secagg_dp.noise.add_then_remove`).

Model (the simulator's, and the protocol's): n clients; each is in the round's roster with probability r (it
checked in and advertised keys) and in the sum with probability gamma (it also delivered its masked input).
Given that K = k clients are in the sum, the number d of roster members that dropped before their input is
Binomial(n - k, rho), rho = (r - gamma) / (1 - gamma), independent of the data (each of the other n - k
clients is, on its own, in the roster-but-dropped state with that conditional probability). The roster has
N = k + d clients and the tolerance is D(N) = floor(tau N). After removal the sum of the k inputs carries
Skellam noise of variance at least

    V(k, d) = mu                          if d <= D(k + d),
    V(k, d) = k mu / (k + d - D(k + d))   otherwise (nothing is removed: graceful degradation),

(:meth:`secagg_dp.noise.add_then_remove.NoiseSchedule.certified_variance`; grouping only adds independent noise
on top, a post-processing, so it is not credited). Each observer may know d (the server does), so the base RDP
is that of the pair (d, sum) with d revealed: since d has the same law under both neighbouring datasets,

    eps_k(a) = 1/(a - 1) log sum_d P(d) exp((a - 1) eps_Sk(a; V(k, d)))

exactly (the Renyi divergence of a mixture whose component label is revealed), with eps_Sk the Skellam bound of
Agarwal, Kairouz & Liu (2021, Thm 3.5; :func:`secagg_dp.accounting.core.rdp.skellam_rdp`). The sum over d runs
up to d = n - k (no upper truncation); the lower Binomial tail below 1e-40 is merged into its truncation point,
whose variance is smaller (V is non-increasing in N = k + d).

Block bound (the mixture's contract, :class:`~secagg_dp.accounting.checkin.mixture.BaseMechanism`): V(k, d) is
non-increasing in d and non-decreasing in k (D grows by at most 1 per client), and Binomial(n - k, rho) is
stochastically decreasing in k, so eps_{k_lo} bounds every k in [k_lo, k_hi].

Neighbouring relation: ``replace-one`` at the client level, like
:class:`~secagg_dp.accounting.checkin.bases.SkellamSum`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.mixture import SubsampledCheckin
from secagg_dp.accounting.core.rdp import skellam_rdp
from secagg_dp.errors import ParameterError

__all__ = [
    "EnforcedSkellamSum",
    "enforced_checkin_provider",
    "enforced_variance",
    "revealed_dropout_rdp",
    "revealed_mixture_rdp",
    "dropout_weights",
]

_TAIL = 1e-40


def _tolerated(tolerance: float, roster: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """D(N) = floor(tau N) computed exactly from the float tau (as the noise schedule does)."""
    frac = Fraction(tolerance)
    return np.array([(frac.numerator * int(n)) // frac.denominator for n in roster.tolist()], dtype=np.int64)


def enforced_variance(
    target_variance: float, tolerance: float, k: int, dropouts: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """V(k, d) of the module docstring for k inputs in the sum and ``dropouts`` = d roster members dropped."""
    d = np.atleast_1d(np.asarray(dropouts, dtype=np.int64))
    roster = k + d
    top = _tolerated(tolerance, roster)
    with np.errstate(divide="ignore"):
        degraded = k * target_variance / np.maximum(roster - top, 1)
    out: npt.NDArray[np.float64] = np.where(d <= top, target_variance, degraded).astype(np.float64)
    return out


@dataclass(frozen=True)
class EnforcedSkellamSum:
    """Sum of k clients' vectors with add-then-remove Skellam noise of target variance ``target_variance``
    (grid units, in the sum), tolerance ``tolerance`` (D = floor(tau N)); ``roster_rate`` r and ``sum_rate``
    gamma as in the module docstring; replace-one sensitivities ``l2_sensitivity``, ``l1_sensitivity``."""

    target_variance: float
    l2_sensitivity: float
    l1_sensitivity: float
    n: int
    tolerance: float
    roster_rate: float
    sum_rate: float

    def __post_init__(self) -> None:
        check_real("target_variance", self.target_variance, lo=0.0, lo_open=True)
        check_real("l2_sensitivity", self.l2_sensitivity, lo=0.0, lo_open=True)
        check_real("l1_sensitivity", self.l1_sensitivity, lo=0.0, lo_open=True)
        check_int("n", self.n, lo=1)
        check_real("tolerance", self.tolerance, lo=0.0, hi=1.0, hi_open=True)
        check_probability("roster_rate", self.roster_rate)
        check_probability("sum_rate", self.sum_rate)
        if self.sum_rate > self.roster_rate:
            raise ParameterError(
                f"Argument 'sum_rate' must be <= roster_rate = {self.roster_rate}, not {self.sum_rate}."
            )

    @property
    def dropout_rate(self) -> float:
        """rho = P(in the roster, not in the sum | not in the sum) = (r - gamma) / (1 - gamma)."""
        if self.sum_rate >= 1.0:
            return 0.0
        return min(1.0, max(0.0, (self.roster_rate - self.sum_rate) / (1.0 - self.sum_rate)))

    def rdp_upper(self, k_lo: np.ndarray, k_hi: np.ndarray, orders: np.ndarray) -> npt.NDArray[np.float64]:
        ks = np.atleast_1d(np.asarray(k_lo, dtype=np.int64))
        a = tuple(float(o) for o in np.atleast_1d(np.asarray(orders, dtype=np.float64)))
        return np.array([self._rdp_k(max(int(k), 1), a) for k in ks.tolist()], dtype=np.float64).reshape(
            ks.size, len(a)
        )

    @functools.lru_cache(maxsize=4096)  # noqa: B019  (frozen, hashable instance; a handful per run)
    def _rdp_k(self, k: int, orders: tuple[float, ...]) -> npt.NDArray[np.float64]:
        mu = self.target_variance
        n_top = int(_tolerated(self.tolerance, np.array([self.n]))[0])
        return revealed_dropout_rdp(
            np.asarray(orders),
            self.n - min(k, self.n),
            self.dropout_rate,
            lambda ds: enforced_variance(mu, self.tolerance, k, ds),
            min(mu, k * mu / max(self.n - n_top, 1)),
            self.l2_sensitivity,
            self.l1_sensitivity,
        )


def revealed_dropout_rdp(
    orders: npt.NDArray[np.float64],
    trials: int,
    rho: float,
    variance: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]],
    tail_variance: float,
    l2_sensitivity: float,
    l1_sensitivity: float,
) -> npt.NDArray[np.float64]:
    """1/(a-1) log sum_d P(d) exp((a-1) eps_Sk(a; variance(d))), d ~ Binomial(``trials``, ``rho``) revealed.

    The Rényi divergence of a mixture whose data-independent label d is revealed is this sum exactly
    (module docstring); eps_Sk is Agarwal, Kairouz & Liu (2021, Thm 3.5). ``variance`` must be non-increasing
    in d. The sum runs over every d above the lower truncation point of :func:`dropout_weights` (Binomial
    lower tail below 1e-40, merged into that point, whose variance is smaller), up to d = ``trials``: nothing
    above is truncated. ``tail_variance`` (<= variance(d) for every d <= ``trials``) is only checked (it charged
    an upper tail that the sum no longer cuts). Evaluated by :func:`revealed_mixture_rdp` with its pruning
    (an upper bound on the exact sum, larger by less than 1e-25 relative). Shared by :class:`EnforcedSkellamSum`
    and the coalition view (:mod:`secagg_dp.accounting.checkin.coalition`)."""
    a = np.asarray(orders, dtype=np.float64)
    l2, l1 = l2_sensitivity, l1_sensitivity
    check_real("tail_variance", tail_variance, lo=0.0, lo_open=True)
    if trials == 0 or rho == 0.0:
        v0 = float(variance(np.zeros(1, dtype=np.int64))[0])
        return np.asarray(skellam_rdp(a, v0, l2, l1), dtype=np.float64)
    ds, logw = dropout_weights(trials, rho)
    # one term per distinct variance (every d <= D shares mu): weights summed in log space (a far-tail weight,
    # e^-1000, is kept: at high orders its e^{(a-1) eps} can dominate the sum)
    var, inverse = np.unique(variance(ds), return_inverse=True)
    if var.size == ds.size:  # all distinct (np.unique sorted them): no weights to merge
        log_mass = np.empty_like(logw)
        log_mass[inverse] = logw
    else:
        order = np.argsort(inverse, kind="stable")
        runs = np.flatnonzero(np.diff(inverse[order])) + 1
        log_mass = np.logaddexp.reduceat(logw[order], np.concatenate(([0], runs)))
    # rows by decreasing variance: eps_Sk is non-increasing in the variance, so every column is non-decreasing
    var, log_mass = var[::-1], log_mass[::-1]

    def cumulants(rows: npt.NDArray[np.int64], cols: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        sub = a[cols]
        eps = np.asarray(skellam_rdp(sub, var[rows], l2, l1)).reshape(rows.size, sub.size)
        out: npt.NDArray[np.float64] = (sub - 1.0)[None, :] * eps
        return out

    return revealed_mixture_rdp(a, log_mass, cumulants)


#: K(rows, cols): the cumulants (a - 1) eps_j(a) of components j = ``rows`` at the orders ``orders[cols]``.
Cumulants = Callable[[npt.NDArray[np.int64], npt.NDArray[np.int64]], npt.NDArray[np.float64]]


def revealed_mixture_rdp(
    orders: npt.NDArray[np.float64], log_weights: npt.NDArray[np.float64], cumulants: Cumulants
) -> npt.NDArray[np.float64]:
    """max(0, 1/(a-1) log sum_j w_j exp(K_j(a))), K_j(a) = (a-1) eps_j(a): the RDP of a mixture whose component
    label j, of law w, is revealed (its moment is the w-average of the components' moments; van Erven &
    Harremoës 2014, Sec. 2). ``cumulants(rows, cols)`` gives K_j(a) for the components j = ``rows`` (ascending
    indices) and the orders ``orders[cols]``, and every column must be non-decreasing in j (K at a larger
    roster, a smaller variance).

    Pruning (ours): the rows are cut in blocks of :data:`_BLOCK`; a block's mass is at most its size x its
    largest weight x e^{K at its last row}. A block whose bound is e^-64 below the largest exact term at a block
    end is charged with that bound instead of being summed, so the result stays an upper bound on the exact
    sum and exceeds it by less than 1e-25 relative (nothing in float64). The orders fall in two groups (those
    that need the last blocks only, the high orders whose moment sits at the largest K, and the rest); each
    group sums its contiguous range of needed blocks exactly."""
    a = np.asarray(orders, dtype=np.float64)
    w = np.asarray(log_weights, dtype=np.float64)
    every = np.arange(a.size)
    rows = w.size
    if rows <= 4 * _BLOCK:
        return _finish(a, _lse_columns(w, cumulants(np.arange(rows), every)))
    nb = -(-rows // _BLOCK)
    ends = np.minimum(np.arange(1, nb + 1) * _BLOCK, rows) - 1  # each block's last row: its largest K per column
    g_end = cumulants(ends, every)
    if not np.isfinite(g_end).all():  # an infinite moment: no pruning (the exact sum handles it)
        return _finish(a, _lse_columns(w, cumulants(np.arange(rows), every)))
    padded = np.full(nb * _BLOCK, -np.inf)
    padded[:rows] = w
    sizes = np.full(nb, float(_BLOCK))
    sizes[-1] = rows - (nb - 1) * _BLOCK
    bound = (padded.reshape(nb, _BLOCK).max(axis=1) + np.log(sizes))[:, None] + g_end
    floor = (w[ends][:, None] + g_end).max(axis=0) - _PRUNE  # the largest exact term at a block end, less 64
    need = bound > floor[None, :]  # (blocks, orders); the block holding the largest end term is always needed
    first = np.argmax(need, axis=0)
    last = nb - 1 - np.argmax(need[::-1], axis=0)
    total = np.empty(a.size)
    top = first >= nb - _TOP_BLOCKS
    for cols in (np.flatnonzero(top), np.flatnonzero(~top)):
        if cols.size == 0:
            continue
        b0, b1 = int(first[cols].min()), int(last[cols].max())
        lo, hi = b0 * _BLOCK, int(ends[b1]) + 1
        exact = _lse_columns(w[lo:hi], cumulants(np.arange(lo, hi), cols))
        skipped = [x for x in (bound[:b0, cols], bound[b1 + 1 :, cols]) if x.shape[0]]
        if skipped:
            exact = np.logaddexp(exact, _lse_rows(np.concatenate(skipped)))
        total[cols] = exact
    return _finish(a, total)


#: Rows per block of :func:`revealed_mixture_rdp`'s pruning, the margin (natural log) below which a block is
#: charged with its bound, and the last blocks that make an order a high one.
_BLOCK = 32
_PRUNE = 64.0
_TOP_BLOCKS = 2


def _lse_columns(w: npt.NDArray[np.float64], g: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log sum_j exp(w_j + g[j, :]) per column."""
    terms = w[:, None] + g
    peak = terms.max(axis=0)
    with np.errstate(invalid="ignore"):  # inf - inf only for an infinite moment: nan, made +inf below
        terms -= peak
    np.exp(terms, out=terms)
    out: npt.NDArray[np.float64] = peak + np.log(terms.sum(axis=0))
    return np.where(np.isnan(out), np.inf, out)


def _lse_rows(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """log sum_i exp(x[i, :]) per column (-inf for an all -inf column)."""
    peak = x.max(axis=0)
    safe = np.where(np.isfinite(peak), peak, 0.0)
    with np.errstate(divide="ignore"):  # log 0 only in an all -inf column, which keeps its peak
        out: npt.NDArray[np.float64] = np.where(np.isfinite(peak), safe + np.log(np.exp(x - safe).sum(axis=0)), peak)
    return out


def _finish(a: npt.NDArray[np.float64], log_moment: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    out: npt.NDArray[np.float64] = np.maximum(log_moment / (a - 1.0), 0.0)
    return out


@functools.lru_cache(maxsize=8192)
def dropout_weights(trials: int, rho: float) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """(ds, log w): the dropout counts d = d_lo..``trials`` of d ~ Binomial(trials, rho) and log P(d = d) by
    Loader's saddle-point form (Loader 2000, :func:`~secagg_dp.accounting.checkin.tails.log_binom_pmf`), with
    d_lo the largest d whose lower tail P(d' < d) is at most 1e-40 and that tail added to d_lo's weight: the
    variance is non-increasing in d, so charging the tail at d_lo is an upper bound, and it moves the moment by
    at most 1e-40 / P(mode) relative. Cached: the arrays are shared (read only)."""
    from secagg_dp.accounting.checkin.tails import log_binom_pmf

    every = log_binom_pmf(trials, np.arange(trials + 1, dtype=np.float64), rho)
    log_cdf = np.logaddexp.accumulate(every)  # log P(d' <= d)
    d_lo = int(np.searchsorted(log_cdf, math.log(_TAIL), side="right"))  # P(d' < d_lo) <= 1e-40 < P(d' <= d_lo)
    d_lo = min(d_lo, trials)
    ds = np.arange(d_lo, trials + 1, dtype=np.int64)
    logw = every[d_lo:].copy()
    if d_lo > 0:
        logw[0] = log_cdf[d_lo]  # log P(d' <= d_lo): the lower tail merged into d_lo
    ds.flags.writeable = False
    logw.flags.writeable = False
    return ds, logw


def enforced_checkin_provider(
    n: int,
    *,
    target_variance: float,
    l2_sensitivity: float,
    l1_sensitivity: float | None = None,
    dim: int = 1,
    tolerance: float,
    roster_rate: float,
    sum_rate: float,
    amplification: str = "auto",
) -> SubsampledCheckin:
    """The per-k provider of distributed check-in with add-then-remove noise: :class:`EnforcedSkellamSum` with
    replace-one sensitivities twice one client's (``l2_sensitivity``, ``l1_sensitivity`` as in
    :func:`~secagg_dp.accounting.checkin.providers.checkin_provider`), subsampled without replacement at k/n."""
    l2 = check_real("l2_sensitivity", l2_sensitivity, lo=0.0, lo_open=True)
    dim = check_int("dim", dim, lo=1)
    l1 = l2 * min(math.sqrt(dim), l2) if l1_sensitivity is None else check_real("l1_sensitivity", l1_sensitivity)
    mech = EnforcedSkellamSum(target_variance, 2.0 * l2, 2.0 * l1, n, tolerance, roster_rate, sum_rate)
    return SubsampledCheckin(mech, n, amplification=amplification)
