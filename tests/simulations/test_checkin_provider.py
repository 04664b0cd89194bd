"""The simulator and ``secagg-dp account checkin`` build the check-in provider with one builder
(``secagg_dp.accounting.checkin.checkin_provider``): the same sensitivities give the same provider and epsilon.

Fixed quantities (scale s = 64, d = 16, sigma = 0.8 per unit of C): one client's vector has L2 norm <= s on the
grid and, having integer coordinates, L1 norm <= s min(sqrt(d), s) = 4 s; replace-one doubles both.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from types import SimpleNamespace

import pytest

from secagg_dp.accounting.checkin import checkin_epsilon, checkin_orders
from simulations.cli import main
from simulations.privacy import checkin_provider_for
from tests.simulations.conftest import small_config

S, D, SIGMA, N, GAMMA, T, DELTA = 64.0, 16, 0.8, 40, 0.25, 3, 1e-5


def _cli(*extra: str) -> dict:
    argv = ["account", "checkin", "--n", str(N), "--gamma", str(GAMMA), "--sigma", str(SIGMA), "--rounds", str(T)]
    argv += ["--delta", str(DELTA), "--scale", str(S), "--dim", str(D), "--max-order", "64", "--json", *extra]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


def _plan(l2: float, l1: float) -> SimpleNamespace:
    return SimpleNamespace(sigma_int=SIGMA * S, l2_sensitivity=l2, l1_sensitivity=l1, padded_dim=D)


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_client_level_simulator_and_cli_give_the_same_provider(mechanism):
    cfg = small_config(population={"clients": N}, privacy={"mechanism": mechanism})
    sim = checkin_provider_for(cfg, _plan(S, S * min(math.sqrt(D), S)))
    # replace-one: the sum's sensitivities are twice one client's
    assert sim.neighbouring == "replace-one" and sim.mechanism.l2_sensitivity == 2 * S
    assert sim.mechanism.l1_sensitivity == 2 * S * 4.0
    cert = checkin_epsilon(sim, N, GAMMA, T, DELTA, checkin_orders(64), method="rdp")
    doc = _cli("--mechanism", mechanism, "--method", "rdp")
    assert doc["epsilon"] == cert.epsilon and doc["order"] == cert.order


@pytest.mark.parametrize("mechanism", ["ddg", "skellam"])
def test_sample_level_simulator_and_cli_give_the_same_provider(mechanism):
    cfg = small_config(
        population={"clients": N},
        privacy={"mechanism": mechanism, "unit": "sample"},
        task={"name": "logreg", "local_steps": 2, "sample_rate": 0.5},
    )
    sim = checkin_provider_for(cfg, _plan(S, S * min(math.sqrt(D), S)))
    assert sim.neighbouring == "add-remove" and sim.mechanism.l2_sensitivity == S  # one sample, not doubled
    cert = checkin_epsilon(sim, N, GAMMA, T, DELTA, checkin_orders(64), method="rdp")
    doc = _cli("--mechanism", mechanism, "--method", "rdp", "--local-steps", "2", "--sample-rate", "0.5")
    assert doc["epsilon"] == cert.epsilon and doc["order"] == cert.order
