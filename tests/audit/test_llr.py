"""Exact log likelihood ratios (secagg_dp.audit.llr) against brute-force oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secagg_dp.audit.llr import ddg_sum_log_pmf, exact_llr, mixture_llr, skellam_log_pmf
from secagg_dp.errors import ParameterError


def _skellam_brute(z: int, v: float) -> float:
    """P[P1 - P2 = z], P1, P2 ~ Poisson(v/2) independent, by summing the Poisson pmfs (Skellam 1946)."""
    lam = v / 2.0
    return sum(
        math.exp(-2 * lam + (i + z) * math.log(lam) + i * math.log(lam) - math.lgamma(i + z + 1) - math.lgamma(i + 1))
        for i in range(max(0, -z), 200)
    )


def _ddg_brute(sigma: float, k: int, zs: list[int]) -> list[float]:
    """Sum of k discrete Gaussians by direct k-fold convolution in Python floats on [-40 sigma, 40 sigma]."""
    r = int(40 * sigma) + 5
    w = [math.exp(-(x * x) / (2 * sigma * sigma)) for x in range(-r, r + 1)]
    s = sum(w)
    one = {x: w[x + r] / s for x in range(-r, r + 1)}
    acc = dict(one)
    for _ in range(k - 1):
        nxt: dict[int, float] = {}
        for a, pa in acc.items():
            for b, pb in one.items():
                nxt[a + b] = nxt.get(a + b, 0.0) + pa * pb
        acc = nxt
    return [acc.get(z, 0.0) for z in zs]


@pytest.mark.parametrize("v", [0.3, 4.0, 37.5])
def test_skellam_log_pmf_matches_poisson_difference(v: float) -> None:
    zs = [-9, -2, 0, 1, 5]
    got = np.exp(skellam_log_pmf(zs, v))
    assert got == pytest.approx([_skellam_brute(z, v) for z in zs], rel=1e-9)


@pytest.mark.parametrize(("sigma", "k"), [(0.7, 1), (1.5, 3), (2.0, 4)])
def test_ddg_sum_matches_direct_convolution(sigma: float, k: int) -> None:
    zs = [-7, -1, 0, 2, 6]
    logp, tail = ddg_sum_log_pmf(zs, sigma, k)
    assert np.exp(logp) == pytest.approx(_ddg_brute(sigma, k, zs), rel=1e-9)
    assert 0 < tail <= k * 2.0**-79


def test_exact_and_mixture_llr_formulas() -> None:
    v, mu, y, w = 6.0, 2, np.array([-3, 0, 4]), 0.25
    p = {d: np.array([_skellam_brute(int(t), v) for t in y + d]) for d in (-mu, 0, mu)}
    want = np.log(p[-mu] / p[mu])
    got = exact_llr(skellam_log_pmf(y - mu, v), skellam_log_pmf(y + mu, v))
    assert got == pytest.approx(want, rel=1e-9)
    want_mix = np.log((w * p[-mu] + (1 - w) * p[0]) / (w * p[mu] + (1 - w) * p[0]))
    lm, lp, l0 = (skellam_log_pmf(y + d, v) for d in (-mu, mu, 0))
    assert mixture_llr(lm, lp, l0, np.full(3, w)) == pytest.approx(want_mix, rel=1e-9)
    assert np.all(mixture_llr(lm, lp, l0, np.zeros(3)) == 0.0)  # the canary surely absent: no information


def test_bad_input_is_refused() -> None:
    with pytest.raises(ParameterError, match="variance"):
        skellam_log_pmf([0], 0.0)
    with pytest.raises(ParameterError, match="'k'"):
        ddg_sum_log_pmf([0], 1.0, 0)
    with pytest.raises(ParameterError, match="weight"):
        mixture_llr([0.0], [0.0], [0.0], [1.5])
