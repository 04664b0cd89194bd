"""Discrete noise for distributed DP: discrete Gaussian and Skellam samplers and their exact pmfs.

* :func:`sample_discrete_gaussian` — vectorised CKS20 sampler (float64 fast path).
* :func:`sample_discrete_gaussian_exact` — the same algorithm in exact rational arithmetic (slow, exact).
* :func:`sample_skellam` — Poisson(v/2) − Poisson(v/2).
* pmfs and log-pmfs normalised to double precision.
* :mod:`secagg_dp.noise.aggregate` — the sum of K parties' noise as one draw (exact for Skellam, within a
  proven total-variation bound for the discrete Gaussian).

Randomness: ``rng=None`` means a fresh AES-CTR generator seeded from OS entropy
(:func:`secagg_dp.rng.resolve_rng`); pass a seeded ``np.random.Generator`` for reproducibility.
"""

from secagg_dp.noise._checks import SIGMA_MAX, VARIANCE_MAX
from secagg_dp.noise.discrete_gaussian import (
    discrete_gaussian_log_normaliser,
    discrete_gaussian_logpmf,
    discrete_gaussian_pmf,
    sample_discrete_gaussian,
)
from secagg_dp.noise.exact import (
    bernoulli_exp_exact,
    sample_discrete_gaussian_exact,
    sample_discrete_laplace_exact,
)
from secagg_dp.noise.skellam import sample_skellam, skellam_logpmf, skellam_pmf

__all__ = [
    "sample_discrete_gaussian",
    "sample_discrete_gaussian_exact",
    "sample_skellam",
    "discrete_gaussian_pmf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_log_normaliser",
    "skellam_pmf",
    "skellam_logpmf",
    "bernoulli_exp_exact",
    "sample_discrete_laplace_exact",
    "SIGMA_MAX",
    "VARIANCE_MAX",
]
