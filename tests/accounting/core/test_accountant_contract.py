"""The accountant contract, one base class every accountant's test class inherits.

Model: dp-accounting's ``privacy_accountant_test.py``. The base class checks what the contract promises
(refusal before any state change, naming the sub-event; chaining; associativity; count = 2 is composing
twice; monotonicity in count; epsilon(delta) and delta(epsilon) inverse; the certificate record; fresh and
copy). Known answers and cross-checks against independent computations are in the per-accountant tests.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from secagg_dp.accounting import (
    BOUNDS,
    Certificate,
    CheckinAccountant,
    CheckinRound,
    Composed,
    DiscreteGaussian,
    GaussianSum,
    PLDAccountant,
    PoissonSampled,
    PrivacyAccountant,
    RdpAccountant,
    SampledWithoutReplacement,
    SelfComposed,
    SkellamSum,
    SubsampledCheckin,
    UnsupportedEventError,
)
from secagg_dp.accounting.core.events import Gaussian, PrivacyEvent
from secagg_dp.errors import ParameterError

DELTA = 1e-5


class AccountantContract:
    """Inherit, and define ``make`` (an empty accountant), ``event_a``/``event_b`` (supported events; equal for
    accountants that certify repetitions of one event) and ``refused`` (an event composed after ``event_a`` is
    refused, with the name of the offending sub-event in ``refused_name``)."""

    rel = 1e-9  # composition-order tolerance of the accountant's numerics
    inverse_rel = 1e-6  # delta(epsilon(delta)) within this of delta

    def make(self) -> PrivacyAccountant:
        raise NotImplementedError

    event_a: PrivacyEvent
    event_b: PrivacyEvent
    refused: PrivacyEvent
    refused_name: str

    def test_supports_its_events(self):
        acc = self.make()
        assert acc.supports(self.event_a) and acc.supports(self.event_b)

    def test_refusal_names_the_sub_event_and_keeps_state(self):
        acc = self.make().compose(self.event_a)
        before = (acc.get_epsilon(DELTA), acc.events)
        assert not acc.supports(self.refused)
        with pytest.raises(UnsupportedEventError, match=self.refused_name):
            acc.compose(self.refused)
        with pytest.raises(UnsupportedEventError, match="NotAnEvent|object"):
            acc.compose(object())  # type: ignore[arg-type]
        with pytest.raises(ParameterError, match="count"):
            acc.compose(self.event_a, -1)
        with pytest.raises(ParameterError, match="count"):
            acc.compose(self.event_a, 1.5)  # type: ignore[arg-type]
        assert (acc.get_epsilon(DELTA), acc.events) == before

    def test_compose_chains(self):
        acc = self.make()
        assert acc.compose(self.event_a) is acc
        assert acc.compose(self.event_b, 2) is acc
        assert acc.events == ((self.event_a, 1), (self.event_b, 2))

    def test_composition_is_associative(self):
        ab = self.make().compose(self.event_a).compose(self.event_b).get_epsilon(DELTA)
        ba = self.make().compose(self.event_b).compose(self.event_a).get_epsilon(DELTA)
        assert ab == pytest.approx(ba, rel=self.rel)

    def test_count_two_is_composing_twice(self):
        two = self.make().compose(self.event_a, 2).get_epsilon(DELTA)
        twice = self.make().compose(self.event_a).compose(self.event_a).get_epsilon(DELTA)
        assert two == pytest.approx(twice, rel=self.rel)

    def test_monotone_in_count(self):
        eps = [self.make().compose(self.event_a, c).get_epsilon(DELTA) for c in (1, 2, 4)]
        assert 0.0 < eps[0] < eps[1] < eps[2]

    def test_empty_and_zero_count(self):
        for acc in (self.make(), self.make().compose(self.event_a, 0)):
            assert acc.get_epsilon(DELTA) == 0.0 and acc.get_delta(1.0) == 0.0

    def test_epsilon_and_delta_are_inverse(self):
        acc = self.make().compose(self.event_a, 3)
        eps = acc.get_epsilon(DELTA)
        back = acc.get_delta(eps)
        assert back <= DELTA * (1 + self.inverse_rel) and back >= DELTA * (1 - 10 * self.inverse_rel) - 1e-300
        assert acc.get_epsilon(back) <= eps * (1 + self.inverse_rel)
        assert acc.get_delta(2.0 * eps) < back  # and both move the right way

    def test_certificate_record(self):
        acc = self.make().compose(self.event_a, 2)
        cert = acc.certificate(DELTA)
        assert isinstance(cert, Certificate)
        assert cert.epsilon == pytest.approx(acc.get_epsilon(DELTA), rel=1e-12) and cert.delta == DELTA
        assert (cert.observer, cert.neighbouring, cert.method) == (acc.observer, acc.neighbouring, acc.method)
        assert cert.certificate is True and cert.bound == "upper" and cert.citation.strip()
        assert cert.slack >= 0.0 and math.isfinite(cert.slack)
        assert set(cert.as_dict()) >= {"epsilon", "delta", "observer", "neighbouring", "method", "certificate"}
        with pytest.raises(dataclasses.FrozenInstanceError):
            cert.epsilon = 0.0  # type: ignore[misc]

    def test_fresh_and_copy(self):
        acc = self.make().compose(self.event_a)
        eps = acc.get_epsilon(DELTA)
        fresh = acc.fresh()
        assert type(fresh) is type(acc) and fresh.events == () and fresh.get_epsilon(DELTA) == 0.0
        assert (fresh.neighbouring, fresh.observer, fresh.method) == (acc.neighbouring, acc.observer, acc.method)
        copy = acc.copy()
        assert copy.get_epsilon(DELTA) == pytest.approx(eps, rel=1e-12) and copy.events == acc.events
        copy.compose(self.event_a)
        assert acc.get_epsilon(DELTA) == eps and len(acc.events) == 1  # the copy shares no state


def test_certificate_refuses_a_lower_bound_labelled_as_certificate():
    ok = dict(epsilon=1.0, delta=1e-5, observer="analyst", neighbouring="add-remove", method="x", citation="A 2020")
    with pytest.raises(ParameterError, match="upper bound"):
        Certificate(**ok, certificate=True, bound="lower")
    with pytest.raises(ParameterError, match="citation"):
        Certificate(**{**ok, "citation": " "}, certificate=True)
    with pytest.raises(ParameterError, match="epsilon"):
        Certificate(**{**ok, "epsilon": math.nan}, certificate=True)
    with pytest.raises(ParameterError, match="observer"):
        Certificate(**{**ok, "observer": "everyone"}, certificate=True)
    assert Certificate(**ok, certificate=False, bound="estimate").bound in BOUNDS


G = Gaussian(1.0, 1.0, "add-remove")


class TestRdpAccountant(AccountantContract):
    event_a = G
    event_b = PoissonSampled(0.1, Gaussian(0.8, 1.0, "add-remove"))
    refused = SelfComposed(SampledWithoutReplacement(5, 10, Gaussian(1.0, 2.0, "replace-one")), 2)
    refused_name = "SampledWithoutReplacement"

    def make(self):
        return RdpAccountant("add-remove")


class TestPLDAccountant(AccountantContract):
    rel = 1e-6
    inverse_rel = 1e-3  # the grid: delta(eps) is evaluated at the grid's losses
    event_a = Gaussian(2.0, 1.0, "add-remove")
    event_b = PoissonSampled(0.2, Gaussian(1.0, 1.0, "add-remove"))
    refused = Composed((Gaussian(2.0, 1.0, "add-remove"), DiscreteGaussian(2.0, 1.0, "add-remove")))
    refused_name = "DiscreteGaussian"

    def make(self):
        return PLDAccountant("add-remove", value_discretization_interval=1e-3)


def _round(mech, gamma: float = 0.3, n: int = 30) -> CheckinRound:
    return CheckinRound(SubsampledCheckin(mech, n), n, gamma, None, "replace-one")


GAUSS_ROUND = _round(GaussianSum(1.0))
SKELLAM_ROUND = _round(SkellamSum(40.0, 2.0, 4.0), gamma=0.5)


class TestCheckinRdp(AccountantContract):
    event_a = GAUSS_ROUND
    event_b = SKELLAM_ROUND
    refused = Gaussian(1.0, 2.0, "replace-one")
    refused_name = "Gaussian"

    def make(self):
        return CheckinAccountant("rdp")


class TestCheckinRdpServer(TestCheckinRdp):
    def make(self):
        return CheckinAccountant("rdp", observer="server")

    def test_server_sees_more(self):
        analyst = CheckinAccountant("rdp").compose(GAUSS_ROUND, 3).get_epsilon(DELTA)
        assert self.make().compose(GAUSS_ROUND, 3).get_epsilon(DELTA) > analyst


class TestCheckinWindow(AccountantContract):
    inverse_rel = 1e-3  # bisection on log delta to 1e-4
    event_a = event_b = GAUSS_ROUND
    refused = SKELLAM_ROUND  # the window method certifies repetitions of one round
    refused_name = "CheckinRound"

    def make(self):
        return CheckinAccountant("window")


class TestCheckinPld(AccountantContract):
    rel = 1e-12  # T repetitions of one round: the same computation either way
    inverse_rel = 1e-3
    event_a = event_b = GAUSS_ROUND
    refused = SKELLAM_ROUND  # a Skellam base has no PLD here
    refused_name = "CheckinRound"

    def make(self):
        return CheckinAccountant("pld")

    def test_refusal_says_why(self):
        with pytest.raises(UnsupportedEventError, match="GaussianSum"):
            self.make().compose(SKELLAM_ROUND)

    @pytest.mark.slow  # get_delta bisects on delta: ~60 PLD certificates, over 10 s: CI only
    def test_epsilon_and_delta_are_inverse(self):
        super().test_epsilon_and_delta_are_inverse()


def test_rdp_certificate_flags_an_optimum_at_the_largest_order():
    # Gaussian z = 10: the CKS20 optimum at delta = 1e-5 lies far above order 3, so the grid {2, 3} ends there
    small = RdpAccountant("add-remove", [2.0, 3.0]).compose(Gaussian(10.0, 1.0, "add-remove")).certificate(DELTA)
    assert small.order == 3.0 and small.detail["optimal_order_is_largest"] is True
    full = RdpAccountant("add-remove").compose(Gaussian(10.0, 1.0, "add-remove")).certificate(DELTA)
    assert full.detail["optimal_order_is_largest"] is False and full.epsilon < small.epsilon


class TestCheckinServerExPost(AccountantContract):
    event_a = event_b = GAUSS_ROUND
    refused = CheckinRound(SubsampledCheckin(GaussianSum(1.0), 30), 30, None, 10, "replace-one")
    refused_name = "CheckinRound"  # fixed-size sampling: the ex-post view needs gamma

    def make(self):
        return CheckinAccountant(observer="server", ex_post=True)

    def test_ex_post_is_the_server_ex_post_certificate(self):
        # the accountant form and the function form compute the same per-round moment; independent check of the
        # moment at n = 2: K' ~ Bin(1, gamma), so the target is in a sum of 1 or 2 clients, with the Gaussian sum's
        # eps_k(a) = 2a / (k sigma^2) (Mironov 2017, Prop. 7): log((1-g) e^{(a-1) 2a} + g e^{(a-1) a}) / (a-1)
        import numpy as np

        from secagg_dp.accounting import rdp_to_dp, server_ex_post_certificate

        cert = self.make().compose(GAUSS_ROUND, 3).certificate(DELTA)
        fn = server_ex_post_certificate(GaussianSum(1.0), 30, 0.3, 3, DELTA)
        assert (cert.epsilon, cert.order, cert.detail["ex_post"]) == (fn.epsilon, float(fn.order), True)
        two = CheckinRound(SubsampledCheckin(GaussianSum(1.0), 2), 2, 0.5, None, "replace-one")
        acc = self.make()
        a = acc.orders
        moment = np.logaddexp(np.log(0.5) + (a - 1) * 2 * a, np.log(0.5) + (a - 1) * a)
        expected, _ = rdp_to_dp(a, 3 * moment / (a - 1), DELTA, warn=False)
        assert acc.compose(two, 3).get_epsilon(DELTA) == pytest.approx(expected, rel=1e-9)

    def test_ex_post_needs_the_server_and_rdp(self):
        with pytest.raises(ParameterError, match="ex_post"):
            CheckinAccountant(ex_post=True)
        with pytest.raises(ParameterError, match="ex_post"):
            CheckinAccountant("window", observer="server", ex_post=True)


class TestShuffleAccountant(AccountantContract):
    from secagg_dp.accounting import ShuffleRound as _SR

    event_a = event_b = _SR(1000, 2.0, 0.1)
    refused = _SR(1000, 3.0, 0.1)  # repetitions of one round only
    refused_name = "ShuffleRound"

    def make(self):
        from secagg_dp.accounting import ShuffleAccountant

        return ShuffleAccountant("checkin-upper", orders=range(2, 65))

    def test_estimates_are_labelled(self):
        from secagg_dp.accounting import ShuffleAccountant, ShuffleRound

        cert = ShuffleAccountant("checkin-pair", orders=range(2, 33)).compose(ShuffleRound(1000, 2.0, 0.1), 3)
        c = cert.certificate(DELTA)
        assert (c.certificate, c.bound, c.method) == (False, "estimate", "shuffle-checkin-pair")

    def test_upper_bound_is_the_unshuffled_gaussian(self):
        # gaussian-upper: LT22 Cor. 1, the Gaussian RDP a / (2 sigma^2) of sensitivity 1 (Mironov 2017 Prop. 7)
        import numpy as np

        from secagg_dp.accounting import ShuffleAccountant, ShuffleRound, rdp_to_dp

        o = np.arange(2, 65)
        acc = ShuffleAccountant("gaussian-upper", orders=o).compose(ShuffleRound(50, 2.0), 4)
        expected, _ = rdp_to_dp(o, 4 * o / (2 * 2.0**2), DELTA, warn=False)
        assert acc.get_epsilon(DELTA) == pytest.approx(expected, rel=1e-12)

    def test_checkin_bound_needs_gamma(self):
        from secagg_dp.accounting import ShuffleRound

        with pytest.raises(UnsupportedEventError, match="gamma"):
            self.make().compose(ShuffleRound(1000, 2.0))


def test_registry_builds_one_class_per_method():
    from secagg_dp.accounting import ACCOUNTANTS, ShuffleAccountant, make_accountant

    assert set(ACCOUNTANTS) == {
        "rdp",
        "pld",
        "checkin-rdp",
        "window",
        "checkin-pld",
        "shuffle",
        "random-checkin-pld",
        "random-checkin-rdp",
    }
    assert ACCOUNTANTS["rdp"] is RdpAccountant and ACCOUNTANTS["shuffle"] is ShuffleAccountant
    for name, method in (("checkin-rdp", "rdp"), ("window", "window"), ("checkin-pld", "pld")):
        acc = make_accountant(name, observer="server")
        assert isinstance(acc, CheckinAccountant) and acc.method == method and acc.observer == "server"
        assert type(acc.fresh()) is type(acc)
    with pytest.raises(ParameterError, match="name"):
        make_accountant("moments")
    with pytest.raises(TypeError):
        make_accountant("window", obsever="server")  # a typo is not swallowed
    with pytest.raises(ParameterError, match="method"):
        ACCOUNTANTS["window"]("rdp")


def test_legacy_records_convert_to_one_certificate_with_the_same_numbers():
    from secagg_dp.accounting import checkin_epsilon, checkin_pld

    rdp = checkin_epsilon(SubsampledCheckin(GaussianSum(1.0), 30), 30, 0.3, 3, DELTA)
    c = rdp.as_certificate()
    assert isinstance(c, Certificate) and (c.epsilon, c.order, c.method) == (rdp.epsilon, float(rdp.order), "rdp")
    assert rdp.as_dict() == c.as_dict(schema="checkin") and c.as_dict()["detail"]["rounds"] == 3
    pld = checkin_pld(30, 0.3, 1.0, 3, DELTA)
    p = pld.as_certificate()
    assert (p.epsilon, p.slack) == (pld.epsilon, pld.epsilon - min(pld.epsilon_optimistic, pld.epsilon))
    assert pld.as_dict() == p.as_dict(schema="pld") and pld.as_dict()["order"] is None
    with pytest.raises(ParameterError, match="schema"):
        p.as_dict(schema="xml")
