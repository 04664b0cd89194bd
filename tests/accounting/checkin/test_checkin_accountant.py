"""The check-in accountant behind the contract: each method gives the check-in certificate it wraps, the
tightest certified method is chosen by epsilon, and CheckinRound is a library event needing no registration."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from secagg_dp.accounting import (
    CheckinAccountant,
    CheckinRound,
    GaussianSum,
    RdpAccountant,
    SkellamSum,
    SubsampledCheckin,
    UnsupportedEventError,
    checkin_epsilon,
    checkin_pld,
    pld_supports,
    register_event_type,
    server_certificate,
    tightest_method,
    window_certificate,
)
from secagg_dp.errors import ParameterError

ORDERS = np.arange(2, 129)
N, GAMMA, T, DELTA = 50, 0.3, 4, 1e-5
GAUSS = CheckinRound(SubsampledCheckin(GaussianSum(1.0), N), N, GAMMA, None, "replace-one")
SKELLAM = CheckinRound(SubsampledCheckin(SkellamSum(40.0, 2.0, 4.0), N), N, GAMMA, None, "replace-one")


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # best order at the largest offered: not under test here
        yield


def test_each_method_is_the_certificate_it_wraps():
    prov = GAUSS.provider
    rdp = CheckinAccountant("rdp", orders=ORDERS).compose(GAUSS, T).certificate(DELTA)
    assert rdp.epsilon == pytest.approx(checkin_epsilon(prov, N, GAMMA, T, DELTA, ORDERS).epsilon, rel=1e-12)
    server = CheckinAccountant("rdp", orders=ORDERS, observer="server").compose(GAUSS, T).get_epsilon(DELTA)
    assert server == pytest.approx(server_certificate(prov.mechanism, N, GAMMA, T, DELTA, ORDERS).epsilon, rel=1e-12)
    win = CheckinAccountant("window", orders=ORDERS).compose(GAUSS, T).certificate(DELTA)
    assert win.epsilon == window_certificate(prov, N, GAMMA, T, DELTA, ORDERS).epsilon and win.method == "window"
    pld = CheckinAccountant("pld").compose(GAUSS, T).certificate(DELTA)
    want = checkin_pld(N, GAMMA, 1.0, T, DELTA)
    assert pld.epsilon == want.epsilon and pld.slack == pytest.approx(want.epsilon - want.epsilon_optimistic)
    assert CheckinAccountant("pld", observer="server").compose(GAUSS, T).get_epsilon(DELTA) == pytest.approx(
        checkin_pld(N, GAMMA, 1.0, T, DELTA, observer="server").epsilon
    )


def test_tightest_method_picks_the_smallest_certificate():
    method, eps = tightest_method(GAUSS, T, DELTA, orders=ORDERS)
    assert set(eps) == {"rdp", "window", "pld"} and method == min(eps, key=eps.get) == "pld"
    method, eps = tightest_method(SKELLAM, T, DELTA, orders=ORDERS)
    assert set(eps) == {"rdp", "window"} and method == min(eps, key=eps.get)  # no PLD for a Skellam base
    assert pld_supports(GAUSS) and not pld_supports(SKELLAM)
    with pytest.raises(ParameterError, match="No check-in method"):
        tightest_method(SKELLAM, T, DELTA, methods=("pld",))


def test_refusals():
    with pytest.raises(ParameterError, match="method"):
        CheckinAccountant("exact")
    with pytest.raises(ParameterError, match="integers"):
        CheckinAccountant("rdp", orders=[2.5, 3.0])
    fixed = CheckinRound(SubsampledCheckin(GaussianSum(1.0), N), N, None, 10, "replace-one")
    assert CheckinAccountant("rdp").supports(fixed)
    for method in ("window", "pld"):
        with pytest.raises(UnsupportedEventError, match="gamma"):
            CheckinAccountant(method).compose(fixed)
    with pytest.raises(UnsupportedEventError, match="add-remove"):
        CheckinAccountant("rdp", "add-remove").compose(GAUSS)


@pytest.mark.slow  # over ~3 s under load: CI only, not the quick loop
def test_checkin_round_needs_no_registration_and_no_module_changes_global_state():
    assert RdpAccountant("replace-one", ORDERS).supports(GAUSS)
    assert register_event_type(CheckinRound) is CheckinRound  # kept for compatibility; a check only
    # a fresh interpreter that never imports the simulator: the core accountant composes the library event
    code = (
        "from secagg_dp.accounting.core.rdp_accountant import RdpAccountant\n"
        "from secagg_dp.accounting.checkin.events import CheckinRound\n"
        "from secagg_dp.accounting.checkin.mixture import SubsampledCheckin\n"
        "from secagg_dp.accounting.checkin.bases import GaussianSum\n"
        "ev = CheckinRound(SubsampledCheckin(GaussianSum(1.0), 20), 20, 0.5, None, 'replace-one')\n"
        "assert RdpAccountant('replace-one', list(range(2, 33))).supports(ev)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    from simulations.privacy import CheckinRound as SimRound

    assert SimRound is CheckinRound
