"""DDG and Skellam RDP bounds are >= the exact Rényi divergence computed from the pmfs (1-D, integer shifts)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import ive, logsumexp

from secagg_dp.accounting import ddg_rdp, discrete_gaussian_rdp, skellam_rdp

ALPHAS = np.array([2.0, 3.0, 5.0, 8.0])


def _renyi(logp: np.ndarray, shift: int, alpha: float) -> float:
    """D_alpha(P || P(. - shift)) summed over the overlap of the truncated supports.

    The support -T..T is so wide (T >> 2(alpha-1)shift) that the terms left out, of size
    exp(-(T^2 - 2(alpha-1)T shift)/(2 sigma^2)), are far below double precision.
    """
    lp = logp[shift:]  # P(x) for x = -T+shift..T
    lq = logp[:-shift]  # Q(x) = P(x - shift)
    ok = np.isfinite(lp) & np.isfinite(lq)
    terms = alpha * lp[ok] + (1 - alpha) * lq[ok]
    return float(logsumexp(terms) / (alpha - 1))


def _dg_logpmf(sigma: float, T: int) -> np.ndarray:
    # exact discrete Gaussian pmf on -T..T, normalised over a support wide enough that the rest is < 1e-300
    x = np.arange(-T, T + 1, dtype=np.float64)
    lw = -x * x / (2 * sigma * sigma)
    return lw - logsumexp(lw)


def _log_convolve(la: np.ndarray, lb: np.ndarray) -> np.ndarray:
    out = np.full(la.size + lb.size - 1, -np.inf)
    for i, v in enumerate(la):
        out[i : i + lb.size] = np.logaddexp(out[i : i + lb.size], v + lb)
    return out


@pytest.mark.parametrize("sigma", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("n", [1, 2, 5])
@pytest.mark.parametrize("shift", [1, 2, 3])
def test_ddg_bound_dominates_exact_divergence(sigma, n, shift):
    T = int(40 * sigma * np.sqrt(n)) + 40
    lp = _dg_logpmf(sigma, T)
    logs = lp
    for _ in range(n - 1):  # n-fold convolution in log space (no underflow): the distributed sum
        logs = _log_convolve(logs, lp)
    bound = ddg_rdp(ALPHAS, n, sigma, 1, float(shift), float(shift))
    for a, b in zip(ALPHAS, bound, strict=True):
        exact = _renyi(logs, shift, a)
        assert b >= exact * (1 - 1e-9), (a, b, exact)
    if n == 1:  # single discrete Gaussian: seed 002 Thm 1, tight at integer (alpha-1)*shift
        exact = [_renyi(logs, shift, a) for a in ALPHAS]
        assert np.allclose(discrete_gaussian_rdp(ALPHAS, sigma, shift), exact, rtol=1e-9)


@pytest.mark.parametrize("mu", [0.5, 2.0, 10.0, 50.0])
@pytest.mark.parametrize("shift", [1, 2, 3])
def test_skellam_bound_dominates_exact_divergence(mu, shift):
    T = int(60 * np.sqrt(mu)) + 60
    k = np.arange(-T, T + 1)
    with np.errstate(divide="ignore"):
        logp = np.log(ive(np.abs(k), mu))  # Skellam(mu/2, mu/2): P(k) = e^{-mu} I_k(mu), variance mu
    bound = skellam_rdp(ALPHAS, mu, float(shift), float(shift))
    for a, b in zip(ALPHAS, bound, strict=True):
        exact = _renyi(logp, shift, a)
        assert b >= exact * (1 - 1e-9), (a, b, exact)


def test_sum_of_discrete_gaussians_is_not_a_discrete_gaussian():
    # seed 002 Lemma 1 is wrong: the pmf of N_Z(0,1)+N_Z(0,1) differs from N_Z(0, 2)
    p = np.exp(_dg_logpmf(1.0, 60))
    s = np.convolve(p, p)
    q = np.exp(_dg_logpmf(np.sqrt(2.0), 120))
    assert np.max(np.abs(s - q)) > 1e-6
