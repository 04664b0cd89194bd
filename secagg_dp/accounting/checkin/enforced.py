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
Agarwal, Kairouz & Liu (2021, Thm 3.5; :func:`secagg_dp.accounting.core.rdp.skellam_rdp`). The sum over d is
truncated where the Binomial tails are below 1e-40: the upper tail is charged with the smallest possible
variance k mu / (n - D(n)), the lower one with the variance at the truncation point (V is non-increasing in
N = k + d, and N <= n).

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
from scipy import stats

from secagg_dp._validate import check_int, check_probability, check_real
from secagg_dp.accounting.checkin.mixture import SubsampledCheckin
from secagg_dp.accounting.core.rdp import skellam_rdp
from secagg_dp.errors import ParameterError

__all__ = ["EnforcedSkellamSum", "enforced_checkin_provider", "enforced_variance", "revealed_dropout_rdp"]

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
    in d: the sum is truncated where the Binomial tails are below 1e-40, the lower tail merged into its
    truncation point (a smaller variance there) and the upper tail charged with ``tail_variance``, which must
    be <= variance(d) for every d <= ``trials``. Shared by :class:`EnforcedSkellamSum` and the coalition view
    (:mod:`secagg_dp.accounting.checkin.coalition`)."""
    a = np.asarray(orders, dtype=np.float64)
    l2, l1 = l2_sensitivity, l1_sensitivity
    if trials == 0 or rho == 0.0:
        v0 = float(variance(np.zeros(1, dtype=np.int64))[0])
        return np.asarray(skellam_rdp(a, v0, l2, l1), dtype=np.float64)
    m = trials
    d_lo = int(max(0, stats.binom.ppf(_TAIL, m, rho) - 1))
    d_hi = int(min(m, stats.binom.isf(_TAIL, m, rho) + 1))
    ds = np.arange(d_lo, d_hi + 1, dtype=np.int64)
    logw = stats.binom.logpmf(ds, m, rho)
    if d_lo > 0:  # the lower tail has at least the variance at d_lo (V is non-increasing in d): merge it there
        logw[0] = np.logaddexp(logw[0], float(stats.binom.logcdf(d_lo - 1, m, rho)))
    # one term per distinct variance (every d <= D shares mu): weights summed in log space
    var, inverse = np.unique(variance(ds), return_inverse=True)
    top = logw.max()
    mass = np.zeros(var.size)
    np.add.at(mass, inverse, np.exp(logw - top))
    with np.errstate(divide="ignore"):
        log_mass = np.log(mass) + top
    eps = np.asarray(skellam_rdp(a, var, l2, l1)).reshape(var.size, a.size)
    terms = log_mass[:, None] + (a - 1.0)[None, :] * eps
    tail = float(stats.binom.sf(d_hi, m, rho))
    if tail > 0.0:  # charged with the smallest variance any roster can leave
        worst = np.asarray(skellam_rdp(a, tail_variance, l2, l1)).reshape(a.size)
        terms = np.vstack([terms, math.log(tail) + (a - 1.0) * worst])
    peak = terms.max(axis=0)
    out: npt.NDArray[np.float64] = (peak + np.log(np.exp(terms - peak).sum(axis=0))) / (a - 1.0)
    return np.maximum(out, 0.0)


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
