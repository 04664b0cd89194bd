"""Tests of secagg_dp.accounting.checkin.baselines (labelled seed baselines)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from secagg_dp.accounting.checkin.baselines import (
    analytic_gaussian_epsilon,
    chernoff_shortcut_epsilon,
    chernoff_shortcut_rdp,
    strong_composition_baseline,
)
from secagg_dp.accounting.checkin.bases import GaussianSum
from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_rdp


def test_analytic_gaussian_against_closed_form_delta():
    # Balle & Wang 2018 Thm 8: delta(eps) = Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)
    from scipy.stats import norm

    eps = analytic_gaussian_epsilon(1.0, 2.0, 1e-5)
    mu = 0.5
    d = norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu)
    assert d == pytest.approx(1e-5, rel=1e-6)


def test_strong_composition_baseline_labelled_and_grows_with_rounds():
    e = [strong_composition_baseline(600000, 1e-3, 1.0, t, 1e-8) for t in (1, 10, 100, 1000)]
    assert all("baseline" in x["method"] for x in e)
    assert all(b["epsilon"] >= a["epsilon"] for a, b in zip(e, e[1:], strict=False))


def test_chernoff_shortcut_upper_bounds_rate_gamma_mixture():
    # With the draft's rate gamma the per-k term is non-increasing in k, so Eq. 11 bounds the mixture.
    n, g, orders = 2000, 0.05, np.arange(2, 33)
    exact = checkin_rdp(SubsampledCheckin(GaussianSum(1.0), n, rate="gamma", gamma=g), n, g, orders)
    short = chernoff_shortcut_rdp(GaussianSum(1.0), n, g, orders)
    assert np.all(short >= exact * (1 - 1e-12))
    assert "baseline" in chernoff_shortcut_epsilon(n, g, 1.0, 10, 1e-5, orders)["method"]
