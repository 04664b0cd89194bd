"""``secagg-dp account/calibrate random-checkin``: flags, JSON keys, labelled lower bound, bad input."""

from __future__ import annotations

import json
import math

import pytest
from scipy import special

from simulations.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_account_central_server_is_the_gaussian_mixture(capsys: pytest.CaptureFixture[str]) -> None:
    """Server, central, B = 1: delta(eps) = gamma x the Gaussian pair mu = 1/sigma (Balle & Wang 2018, Thm 8)."""
    out = _run(
        capsys,
        "account",
        "random-checkin",
        "--n",
        "50",
        "--gamma",
        "0.5",
        "--epoch-rounds",
        "4",
        "--sigma",
        "2",
        "--noise",
        "central",
        "--delta",
        "1e-3",
        "--observer",
        "server",
        "--json",
    )
    assert out["observer"] == "server" and out["certificate"] is True and out["method"] == "pld"
    eps, mu = out["epsilon"], 0.5
    delta = 0.5 * (special.ndtr(-eps / mu + mu / 2) - math.exp(eps) * special.ndtr(-eps / mu - mu / 2))
    assert delta <= 1e-3 * (1 + 1e-9)
    assert out["epsilon_lower"] <= eps
    assert {"server", "epoch_rounds", "slots", "epochs", "noise", "gamma"} <= out.keys()


def test_account_distributed_skellam_rdp_and_coalition(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(
        capsys,
        "account",
        "random-checkin",
        "--n",
        "1000",
        "--gamma",
        "0.5",
        "--epoch-rounds",
        "10",
        "--sigma",
        "1",
        "--mechanism",
        "skellam",
        "--delta",
        "1e-5",
        "--epochs",
        "3",
        "--slots",
        "2",
        "--colluders",
        "2",
        "--min-sum",
        "10",
        "--json",
    )
    assert out["method"] == "rdp" and out["epsilon_lower"] is None
    assert out["coalition"]["epsilon"] >= out["server"]["epsilon"] > 0.0


def test_bad_input_names_the_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["account", "random-checkin", "--n", "10", "--gamma", "0.5", "--epoch-rounds", "2", "--sigma", "1"]
    assert main([*base, "--slots", "3", "--delta", "1e-5"]) == 2
    assert "'slots'" in capsys.readouterr().err
    assert main([*base, "--delta", "1e-5", "--neighbouring", "add-remove"]) == 2
    assert "'--neighbouring'" in capsys.readouterr().err


def test_calibrate_meets_the_target(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(
        capsys,
        "calibrate",
        "random-checkin",
        "--n",
        "100",
        "--gamma",
        "1",
        "--epoch-rounds",
        "5",
        "--noise",
        "central",
        "--delta",
        "1e-5",
        "--epsilon",
        "3",
        "--observer",
        "server",
        "--json",
    )
    assert out["epsilon"] <= 3.0 and out["sigma"] > 0


def test_analyst_gets_the_smaller_of_pld_and_the_amplified_rdp(capsys: pytest.CaptureFixture[str]) -> None:
    """Distributed Gaussian: the analyst's PLD is the server's; without --method the analyst is reported the
    smaller of it and the RDP curve amplified by the epoch coin, each as its own method asked for explicitly."""
    flags = ["account", "random-checkin", "--n", "500", "--gamma", "0.02", "--epoch-rounds", "10"]
    flags += ["--sigma", "1", "--epochs", "5", "--delta", "1e-5", "--noise", "distributed", "--json"]
    auto = _run(capsys, *flags)
    pld = _run(capsys, *flags, "--method", "pld")
    rdp = _run(capsys, *flags, "--method", "rdp")
    assert pld["epsilon"] == pytest.approx(pld["server"]["epsilon"], rel=1e-12)  # post-processing
    assert rdp["detail"]["route"] == "amplified" and rdp["epsilon"] < rdp["server"]["epsilon"]
    assert auto["epsilon"] == min(pld["epsilon"], rdp["epsilon"])
    assert auto["method"] == ("rdp" if rdp["epsilon"] < pld["epsilon"] else "pld")
