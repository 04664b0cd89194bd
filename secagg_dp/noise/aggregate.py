"""The sum of K parties' noise drawn directly: exact for Skellam, within a proven TV bound for the discrete Gaussian.

Where only the sum of K parties' noise vectors is ever observed (a simulated ideal aggregator), it can be drawn
as that sum instead of as K vectors:

* Skellam: Sk(v_1) + Sk(v_2) = Sk(v_1 + v_2) for independent summands (a difference of Poissons, and sums of
  independent Poissons are Poisson; Skellam 1946; Agarwal, Kairouz & Liu 2021, Sec. 3), so K parties'
  Sk(σ²) noise is one Sk(Kσ²) draw per coordinate: the same law, exactly.
* Discrete Gaussian: a sum of K independent N_Z(0, σ²) is *not* N_Z(0, Kσ²) (the inexactness of Wang & Jia
  2020, Lemma 1), but for σ ≥ 1/2 it is within total-variation distance

      τ_K(σ) = 10 · Σ_{k=1}^{K−1} exp(−2π²σ² · k/(k+1))

  of it (Kairouz, Liu & Steinke 2021, arXiv:2102.06387 v4, Proposition 14 with the τ of Theorem 1: the
  closeness of a sum of discrete Gaussians to a discrete Gaussian on which their privacy bound rests; the
  same τ the accountant pays for in :func:`secagg_dp.accounting.core.rdp.ddg_rdp`). Over d independent
  coordinates the TV distance is at most d·τ_K(σ) (TV is subadditive over product measures). The terms
  decrease in k, so τ_K(σ) ≤ 10(K − 1)·e^{−π²σ²}: at σ = 10 and K = 10^6, e^{−987 + 17} ≈ e^{−970}.

:func:`sample_noise_sum` draws the sum one way or the other: one draw per coordinate (Skellam always, within
the sampler's range; discrete Gaussian when d·τ ≤ :data:`TV_BUDGET` = 2^−60, far below the 2^−52 float
granularity the fast samplers already accept), else the K parties' draws added up (tiny σ). Unit tests
compare :func:`discrete_gaussian_sum_tv_bound` with the exact TV distance computed by convolution.
"""

from __future__ import annotations

import math

import numpy as np

from secagg_dp._validate import check_int, check_real
from secagg_dp.errors import ParameterError
from secagg_dp.noise._checks import SIGMA_MAX, VARIANCE_MAX, check_size
from secagg_dp.noise.discrete_gaussian import sample_discrete_gaussian
from secagg_dp.noise.skellam import sample_skellam
from secagg_dp.rng import resolve_rng

__all__ = [
    "TV_BUDGET",
    "discrete_gaussian_sum_log_tv_bound",
    "discrete_gaussian_sum_tv_bound",
    "noise_sum_plan",
    "sample_noise_sum",
]

#: Largest total-variation distance (over the whole noise vector) accepted for one draw of the sum.
TV_BUDGET = 2.0**-60

# Terms summed one by one; beyond, the remaining terms are bounded by the last one (they decrease in k).
_EXACT_TERMS = 1 << 16
_U = 2.0**-52
_BATCH_VALUES = 1 << 20  # noise values per sampler call on the party-by-party path


def discrete_gaussian_sum_log_tv_bound(n_terms: int, sigma: float) -> float:
    """log τ_K(σ), τ_K(σ) = 10·Σ_{k=1}^{K−1} exp(−2π²σ²·k/(k+1)), K = ``n_terms`` (see the module docstring).

    An upper bound on log d_TV(Σ_{i≤K} X_i, N_Z(0, Kσ²)) for independent X_i ~ N_Z(0, σ²) (Kairouz, Liu &
    Steinke 2021, Proposition 14 / Theorem 1, stated for σ ≥ 1/2). Returns −inf for K = 1 (the two laws are
    equal) and +inf for σ < 1/2 (no bound). Computed in log space (τ is e^{−10^5} at the simulator's σ) and
    rounded up: the first 2^16 terms exactly (log-sum-exp, plus a generous relative float margin), the rest
    bounded by (K − 1 − 2^16) times the last exact term, since the terms decrease in k.
    """
    k_max = check_int("n_terms", n_terms, lo=1)
    s = check_real("sigma", sigma, lo=0.0, lo_open=True)
    if k_max == 1:
        return -math.inf
    if s < 0.5:
        return math.inf
    c = 2.0 * math.pi**2 * s * s
    m = min(k_max - 1, _EXACT_TERMS)
    k = np.arange(1, m + 1, dtype=np.float64)
    logs = -c * k / (k + 1.0)
    top = float(logs.max())
    total = float(np.exp(logs - top).sum())
    rest = k_max - 1 - m
    if rest > 0:  # each remaining term is below the m-th (the exponent −c·k/(k+1) decreases in k)
        total += rest * math.exp(float(logs[-1]) - top)
    # float error: the sum of at most 2^16 positive terms and the exp/log calls, rounded up generously
    return math.log(10.0) + top + math.log(total) + (m + 8) * _U * (1.0 + abs(top))


def discrete_gaussian_sum_tv_bound(n_terms: int, sigma: float) -> float:
    """τ_K(σ) = exp(:func:`discrete_gaussian_sum_log_tv_bound`), capped at 1 (a TV distance never exceeds 1).

    May underflow to 0.0 where the bound is below 1e−308; use the log form to compare such values.
    """
    return min(1.0, math.exp(discrete_gaussian_sum_log_tv_bound(n_terms, sigma)))


def noise_sum_plan(mechanism: str, sigma: float, n_terms: int, size: int) -> list[int] | None:
    """How :func:`sample_noise_sum` draws the sum of ``n_terms`` parties' noise: group sizes, or None (per party).

    Each group of g parties is one draw of the sum law (Skellam variance g·σ², discrete Gaussian N_Z(0, gσ²)),
    g limited by the samplers' range (σ√g ≤ 1e6). For the discrete Gaussian the groups are used only when the
    TV bound over the whole vector, ``size`` · Σ_groups τ_g(σ), is at most :data:`TV_BUDGET`; otherwise None.
    """
    if mechanism not in ("ddg", "skellam"):
        raise ParameterError(f"Argument 'mechanism' must be 'ddg' or 'skellam', not {mechanism!r}.")
    s = check_real("sigma", sigma, lo=0.0, lo_open=True, hi=SIGMA_MAX)
    k = check_int("n_terms", n_terms, lo=0)
    size = check_int("size", size, lo=0)
    if k == 0:
        return []
    per_group = max(1, min(k, math.floor(VARIANCE_MAX / (s * s) * (1.0 - 1e-9))))
    groups = [per_group] * (k // per_group) + ([k % per_group] if k % per_group else [])
    if mechanism == "skellam":
        return groups
    if size == 0:
        return groups
    log_budget = math.log(TV_BUDGET) - math.log(size)
    # Σ_g τ_g ≤ (number of groups) · max_g τ_g, and τ_g grows with g
    log_tv = discrete_gaussian_sum_log_tv_bound(max(groups), s) + math.log(len(groups))
    return groups if log_tv <= log_budget else None


def sample_noise_sum(
    mechanism: str,
    sigma: float,
    n_terms: int,
    size: int | tuple[int, ...],
    *,
    rng: np.random.Generator | None = None,
) -> np.ndarray:
    """The sum of ``n_terms`` independent parties' int64 noise arrays of shape ``size``.

    ``mechanism`` "ddg": each party's noise is N_Z(0, σ²) per coordinate; "skellam": Sk(σ²) (variance σ²),
    as :func:`secagg_dp.noise.sample_skellam`. Drawn as one draw per coordinate per group of parties where
    :func:`noise_sum_plan` allows it (exact for Skellam; within total variation :data:`TV_BUDGET` for the
    discrete Gaussian), else party by party. ``n_terms`` = 0 gives zeros.
    """
    shape = check_size(size)
    n = math.prod(shape)
    groups = noise_sum_plan(mechanism, sigma, n_terms, n)
    gen = resolve_rng(rng)
    out = np.zeros(n, dtype=np.int64)
    if groups is None:  # party by party, a batch of parties per sampler call (bounded memory)
        batch = max(1, _BATCH_VALUES // max(n, 1))
        for lo in range(0, n_terms, batch):
            rows = min(batch, n_terms - lo)
            out += _draw(mechanism, 1, sigma, rows * n, gen).reshape(rows, n).sum(axis=0)
    else:
        for g in groups:
            out += _draw(mechanism, g, sigma, n, gen)
    return out.reshape(shape)


def _draw(mechanism: str, parties: int, sigma: float, n: int, gen: np.random.Generator) -> np.ndarray:
    """n values of the sum law of ``parties`` parties: N_Z(0, parties·σ²) or Sk(parties·σ²)."""
    if mechanism == "ddg":
        return sample_discrete_gaussian(sigma * math.sqrt(parties), n, rng=gen)
    return sample_skellam(parties * sigma * sigma, n, rng=gen)
