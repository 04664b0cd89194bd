"""Tests of secagg_dp.accounting.checkin.local_steps (sound bases; Heikkilä 2024 joint noise as comparison)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from secagg_dp.accounting.checkin.local_steps import (
    LocalStep,
    LocalStepsGaussian,
    LocalStepsSkellam,
    fuse_steps,
    heterogeneous_gaussian_rdp,
    local_steps_epsilon,
    seed004_joint_noise_rdp,
    sum_dominating_step,
    table1_comparison,
)
from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_rdp
from secagg_dp.errors import ParameterError

dpa = pytest.importorskip("dp_accounting")


def test_sum_dominating_heterogeneous():
    # seed 004 Appendix: variance sum C_i^2 s_i^2 / l_i^2, sensitivity max C_i / l_i
    steps = [LocalStep(1.0, 2.0, 1.0), LocalStep(0.5, 1.0, 2.0), LocalStep(2.0, 1.0, 4.0)]
    var, sens = sum_dominating_step(steps)
    assert var == pytest.approx(4.0 + 0.25 + 1.0 / 16)
    assert sens == pytest.approx(1.0)


def test_fuse_steps_appendix_example():
    # client 2 runs 2S steps with clip C/2, noise only on even steps: fused step has sensitivity C.
    s = [LocalStep(0.5, 0.0), LocalStep(0.5, 1.0)] * 3
    fused = fuse_steps(s, 3)
    assert len(fused) == 3 and all(f.clip == pytest.approx(1.0) and f.noise_std == pytest.approx(1.0) for f in fused)
    with pytest.raises(ParameterError, match="groups"):
        fuse_steps(s, 4)


def test_poisson_gaussian_matches_dp_accounting():
    # MTZ19 exact formula vs dp_accounting (add/remove, Poisson) at integer orders.
    orders = np.arange(2, 65)
    for q, z, steps in [(0.1, 0.8, 10), (0.01, 1.5, 1), (0.5, 3.0, 3)]:
        mech = LocalStepsGaussian(z, steps, q)
        ours = mech.rdp_upper(np.array([1.0]), np.array([1.0]), orders)[0]
        acc = dpa.rdp.RdpAccountant(orders=[float(o) for o in orders])
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)
        np.testing.assert_allclose(ours, acc._rdp, rtol=1e-9)


def test_joint_noise_only_for_one_step():
    # S = 1: k clients' joint noise, identical to one client with sigma*sqrt(k) (no hidden state).
    orders = np.arange(2, 33)
    a = LocalStepsGaussian(1.0, 1, 0.2).rdp_upper(np.array([4.0]), np.array([4.0]), orders)
    b = LocalStepsGaussian(2.0, 1, 0.2).rdp_upper(np.array([1.0]), np.array([1.0]), orders)
    np.testing.assert_allclose(a, b, rtol=1e-12)
    # S >= 2: only the client's own noise counts, whatever k.
    own = LocalStepsGaussian(1.0, 5, 0.2).rdp_upper(np.array([1.0, 4.0, 100.0]), np.array([1.0, 4.0, 100.0]), orders)
    one = 5 * LocalStepsGaussian(1.0, 1, 0.2).rdp_upper(np.array([1.0]), np.array([1.0]), orders)[0]
    np.testing.assert_allclose(own, np.broadcast_to(one, own.shape), rtol=1e-12)
    # The joint-noise composition survives only as the labelled comparison.
    het = heterogeneous_gaussian_rdp([[LocalStep(1.0, 1.0)] * 5] * 4, 0.2, orders)
    np.testing.assert_allclose(het, seed004_joint_noise_rdp(1.0, 5, 0.2, [4.0], orders)[0], rtol=1e-12)
    assert np.all(het < own[1])


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_table1_ours_at_most_theirs():
    # seed 004 Table 1 (Skellam, 32 bit, Poisson 0.1, eps=5, delta=1e-5 LDP; 1 step / 1 epoch / 5 epochs).
    theirs = {
        (1, 2): 2.78,
        (1, 5): 1.22,
        (1, 10): 0.64,
        (10, 2): 2.61,
        (10, 5): 1.19,
        (10, 10): 0.72,
        (50, 2): 2.85,
        (50, 5): 1.55,
        (50, 10): 1.03,
    }
    rows = table1_comparison()
    for r in rows:
        assert r["certificate"] == (r["steps"] == 1 or r["parties"] == 1)
        if r["parties"] == 1:
            assert r["epsilon"] == pytest.approx(5.0, abs=1e-6)
        else:
            assert r["epsilon"] <= theirs[(r["steps"], r["parties"])]


def test_checkin_with_local_steps_monotone_in_steps():
    orders = np.arange(2, 33)
    e = [
        checkin_rdp(
            SubsampledCheckin(
                LocalStepsGaussian(1.0, s, 0.1), 500, amplification="joint-convexity", neighbouring="add-remove"
            ),
            500,
            0.1,
            orders,
        )
        for s in (1, 2, 8)
    ]
    assert np.all(e[1] >= e[0]) and np.all(e[2] >= e[1])


def test_skellam_local_steps_close_to_gaussian_at_large_variance():
    orders = np.arange(2, 17)
    sk = LocalStepsSkellam(1e8, 1e4, 1e4 * 10, 3, 1.0).rdp_upper(np.array([1.0]), np.array([1.0]), orders)[0]
    ga = LocalStepsGaussian(1.0, 3, 1.0).rdp_upper(np.array([1.0]), np.array([1.0]), orders)[0]
    assert np.all(sk >= ga) and np.allclose(sk, ga, rtol=1e-3)


def test_replace_one_needs_full_batch():
    with pytest.raises(ParameterError, match="add-remove"):
        LocalStepsGaussian(1.0, 2, 0.5, neighbouring="replace-one")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert local_steps_epsilon(1.0, 1, 1.0, 1e-5) > 0


def test_discrete_local_steps_use_own_noise_and_cover_the_gaussian():
    # S = 3, q = 0.1, variance 1e8 grid units with Delta_2 = 1e4 (z = 1): the own-noise bound is the same for
    # every k and never below the exact Poisson-subsampled Gaussian of the same z (MTZ19, dp_accounting-checked
    # above); S = 1 keeps the k clients' joint noise (smaller at k = 5).
    from secagg_dp.accounting.checkin.local_steps import LocalStepsDDG

    orders = np.arange(2, 17)
    k = np.array([1.0, 5.0])
    ga = LocalStepsGaussian(1.0, 3, 0.1).rdp_upper(k, k, orders)
    for mech in (LocalStepsSkellam(1e8, 1e4, 1e5, 3, 0.1), LocalStepsDDG(1e4, 1, 1e4, 1e4, 3, 0.1)):
        r = mech.rdp_upper(k, k, orders)
        np.testing.assert_array_equal(r[0], r[1])
        assert np.all(r >= ga * (1 - 1e-9))
    one = LocalStepsSkellam(1e8, 1e4, 1e5, 1, 0.1).rdp_upper(k, k, orders)
    assert np.all(one[1] < one[0])
