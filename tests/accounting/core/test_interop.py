"""Interop with dp-accounting: a DpEvent handed to us gives the same epsilon as dp-accounting's own accountants.

Tolerances: the RDP accountants share the formulas at integer orders (Mironov, Talwar & Zhang 2019 for the
Poisson-subsampled Gaussian; Wang, Balle & Kasiviswanathan 2019 Thm 27 without replacement), so they agree to
1e-6 relative (float rounding of differently ordered sums; our Thm 27 evaluation differs from dp-accounting's
at large noise, docs/accounting/core.md, so the test stays at moderate z). The PLD accountants build the same
dp-accounting PLDs (add/remove pair, Connect-the-Dots, same grid): agreement to 1e-9 relative.
"""

from __future__ import annotations

import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.privacy_accountant import NeighboringRelation as NR
from scipy import optimize, special

from secagg_dp.accounting import (
    Composed,
    DiscreteGaussian,
    Gaussian,
    PLDAccountant,
    PoissonSampled,
    RdpAccountant,
    SampledWithoutReplacement,
    SelfComposed,
    UnsupportedEventError,
    dp_neighboring_relation,
    from_dp_event,
    to_dp_event,
    wor_gaussian_delta,
)

ORDERS = np.arange(2, 257)
DELTA = 1e-5


def test_round_trip_both_ways():
    theirs = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 1000)
    ours = from_dp_event(theirs)
    assert ours == SelfComposed(PoissonSampled(0.01, Gaussian(1.1, 1.0, "add-remove")), 1000)
    assert to_dp_event(ours) == theirs
    wor = SampledWithoutReplacement(10, 1000, Gaussian(3.0, 2.0, "replace-one"))
    assert to_dp_event(wor) == dpa.SampledWithoutReplacementDpEvent(1000, 10, dpa.GaussianDpEvent(1.5))
    comp = Composed((Gaussian(2.0, 1.0, "add-remove"), PoissonSampled(0.5, Gaussian(1.0, 1.0, "add-remove"))))
    assert from_dp_event(to_dp_event(comp)) == comp
    assert dp_neighboring_relation("replace-one") is NR.REPLACE_ONE


def test_unsupported_events_are_named_both_ways():
    with pytest.raises(UnsupportedEventError, match="DiscreteGaussian"):
        to_dp_event(Composed((Gaussian(1.0, 1.0, "add-remove"), DiscreteGaussian(1.0, 1.0, "add-remove"))))
    with pytest.raises(UnsupportedEventError, match="LaplaceDpEvent"):
        from_dp_event(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(1.0), 3))


def test_a_dp_accounting_user_gets_the_same_rdp_epsilon():
    theirs = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.1)), 1000)
    ours = RdpAccountant("add-remove", ORDERS).compose(from_dp_event(theirs)).get_epsilon(DELTA)
    ref = dpa.rdp.RdpAccountant([float(o) for o in ORDERS]).compose(theirs).get_epsilon(DELTA)
    assert ours == pytest.approx(ref, rel=1e-6)
    # without replacement, replace-one: dp-accounting's noise multiplier is sigma over the replace-one sensitivity
    wor = dpa.SelfComposedDpEvent(dpa.SampledWithoutReplacementDpEvent(1000, 10, dpa.GaussianDpEvent(1.5)), 100)
    few = ORDERS[:63]  # orders 2..64: dp-accounting's without-replacement bound is slow at high orders
    ours = RdpAccountant("replace-one", few).compose(from_dp_event(wor, "replace-one")).get_epsilon(DELTA)
    ref = dpa.rdp.RdpAccountant([float(o) for o in few], NR.REPLACE_ONE).compose(wor).get_epsilon(DELTA)
    assert ours == pytest.approx(ref, rel=1e-6)


def test_a_dp_accounting_user_gets_the_same_pld_epsilon():
    theirs = dpa.ComposedDpEvent(
        [
            dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.02, dpa.GaussianDpEvent(1.0)), 200),
            dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(8.0), 3),
        ]
    )
    ours = PLDAccountant("add-remove", value_discretization_interval=1e-3).compose(from_dp_event(theirs))
    ref = dpa.pld.PLDAccountant(value_discretization_interval=1e-3).compose(theirs)
    assert ours.get_epsilon(DELTA) == pytest.approx(ref.get_epsilon(DELTA), rel=1e-9)
    assert ours.get_delta(1.0) == pytest.approx(ref.get_delta(1.0), rel=1e-9)


def _gaussian_delta(eps: float, mu: float) -> float:
    """Exact delta(eps) of the Gaussian pair N(mu, 1) vs N(0, 1) (Balle & Wang 2018, Thm 8)."""
    return float(special.ndtr(mu / 2 - eps / mu) - math.exp(eps) * special.ndtr(-mu / 2 - eps / mu))


@pytest.mark.parametrize("rel", ["add-remove", "replace-one"])
def test_pld_gaussian_is_above_the_exact_value_by_at_most_its_slack(rel):
    """Independent known answer: T Gaussians of noise multiplier z are one Gaussian of z / sqrt(T) (closed form)."""
    sens = 1.0 if rel == "add-remove" else 2.0
    acc = PLDAccountant(rel).compose(Gaussian(2.0 * sens, sens, rel), 10)  # z = 2, T = 10
    exact = optimize.brentq(lambda e: _gaussian_delta(e, math.sqrt(10) / 2.0) - DELTA, 0.0, 50.0, xtol=1e-12)
    cert = acc.certificate(DELTA)
    assert exact <= cert.epsilon <= exact + cert.slack + 1e-9 and cert.slack < 1e-3


def test_pld_without_replacement_dominates_the_closed_form_pair():
    """One round of the Gaussian sum (std 3, replace-one sensitivity 2) subsampled without replacement at 0.1:
    delta(eps) of the symmetrised Zhu-Dong-Wang pair in closed form (checkin.pld.wor_gaussian_delta)."""
    acc = PLDAccountant("replace-one").compose(SampledWithoutReplacement(10, 100, Gaussian(3.0, 2.0, "replace-one")))
    for eps in (0.01, 0.05, 0.2):
        exact = float(wor_gaussian_delta(0.1, 3.0, np.array([eps]))[0])
        assert exact <= acc.get_delta(eps) <= exact * (1 + 1e-3) + 1e-12


@pytest.mark.parametrize(
    ("q", "z"),
    [(0.01, 1.0), pytest.param(0.2, 0.7, marks=pytest.mark.slow), (0.5, 3.0)],  # (0.2, 0.7): CI only
)
def test_pld_poisson_dominates_the_closed_form_pair(q, z):
    """One Poisson-subsampled Gaussian round (add-remove, sensitivity 1, noise multiplier z): the pair
    (q N(1, z^2) + (1 - q) N(0, z^2), N(0, z^2)) taken both ways has delta(eps) in closed form; it is the pair of
    checkin.pld.wor_gaussian_delta at sensitivity 2 and std 2z (the same pair scaled by 2)."""
    acc = PLDAccountant("add-remove").compose(PoissonSampled(q, Gaussian(z, 1.0, "add-remove")))
    for eps in (0.0, 0.02, 0.3, 1.0):
        exact = float(wor_gaussian_delta(q, 2.0 * z, np.array([eps]))[0])
        assert exact - 1e-15 <= acc.get_delta(eps) <= exact * (1 + 2e-3) + 1e-12
