"""CLI flags and JSON keys exactly as issue 4 states."""

from __future__ import annotations

import json

import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa

from secagg_dp.accounting import DEFAULT_ORDERS
from simulations.cli import build_parser, main

DDG1 = "--clients 100 --dim 65536 --bits 16 --clip 1 --noise-multiplier 1 --k-stddevs 4".split()


def run(capsys, argv):
    code = main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("mech,eps", [("ddg", 4.75376495), ("skellam", 4.753764989)])
def test_account_json_known_answer(capsys, mech, eps):
    code, out, _ = run(capsys, ["account", mech, *DDG1, "--json", "--rdp"])
    assert code == 0
    obj = json.loads(out)
    for key in ("epsilon", "delta", "order", "neighbouring", "method", "rdp"):
        assert key in obj
    assert obj["epsilon"] == pytest.approx(eps, abs=5e-9)
    assert obj["neighbouring"] == "add-remove" and obj["delta"] == 1e-5
    assert obj["rdp"]["orders"] == [int(a) if a.is_integer() else float(a) for a in DEFAULT_ORDERS]
    assert len(obj["rdp"]["values"]) == len(DEFAULT_ORDERS)
    assert obj["padded_dim"] == 65536


def test_account_gaussian_flags(capsys):
    argv = [
        "account",
        "gaussian",
        "--noise-multiplier",
        "2",
        "--rounds",
        "10",
        "--delta",
        "1e-6",
        "--neighbouring",
        "replace-one",
        "--sample-rate",
        "0.1",
        "--sampling",
        "without-replacement",
        "--population",
        "100",
        "--json",
    ]
    code, out, _ = run(capsys, argv)
    obj = json.loads(out)
    assert code == 0 and obj["neighbouring"] == "replace-one" and obj["l2_sensitivity"] == 2.0
    assert "rdp" not in obj and "Thm 27" in obj["method"]
    code, out, _ = run(
        capsys, ["account", "gaussian", "--noise-multiplier", "1", "--sample-rate", "0.01", "--rounds", "1000"]
    )
    assert code == 0 and "epsilon = 2.10775307" in out  # dp-accounting gives 2.1077530754515745 here


def test_calibrate_json(capsys):
    code, out, _ = run(
        capsys, ["calibrate", "gaussian", "--epsilon", "1", "--rounds", "100", "--sample-rate", "0.01", "--json"]
    )
    obj = json.loads(out)
    assert code == 0 and obj["epsilon"] <= 1.0
    # oracle: dp-accounting at the same orders, Poisson-sampled Gaussian, 100 steps, delta 1e-5
    ref = dpa.compute_epsilon(
        DEFAULT_ORDERS,
        100 * dpa._compute_rdp_poisson_subsampled_gaussian(0.01, obj["noise_multiplier"], DEFAULT_ORDERS),
        1e-5,
    )[0]
    assert obj["epsilon"] <= ref + 1e-9 and ref == pytest.approx(1.0, abs=1e-4)
    for key in ("noise_multiplier", "epsilon", "delta", "order", "neighbouring", "method"):
        assert key in obj


def test_errors_are_one_line_exit_2(capsys):
    code, _, err = run(
        capsys,
        ["account", "gaussian", "--noise-multiplier", "1", "--neighbouring", "replace-one", "--sample-rate", "0.1"],
    )
    assert code == 2 and err.startswith("secagg-dp: error:") and err.count("\n") == 1
    code, _, err = run(
        capsys,
        ["calibrate", "ddg", "--epsilon", "1", "--clients", "1000", "--dim", "100", "--bits", "4", "--clip", "1"],
    )
    assert code == 2 and "bits" in err


def test_help_documents_every_flag():
    parser = build_parser()
    acct = parser._subparsers._group_actions[0].choices["account"]
    sub = acct._subparsers._group_actions[0].choices
    for name in ("gaussian", "ddg", "skellam"):
        for action in sub[name]._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, (name, action.option_strings)
    text = sub["ddg"].format_help()
    for flag in (
        "--clients",
        "--dim",
        "--bits",
        "--clip",
        "--noise-multiplier",
        "--k-stddevs",
        "--beta",
        "--rounds",
        "--delta",
        "--neighbouring",
        "--sample-rate",
        "--sampling",
        "--population",
        "--json",
        "--rdp",
    ):
        assert flag in text


def test_core_json_names_both_observers(capsys):
    # Poisson-sampled clients: the server sees who was sampled, so its figure is the revealed-flag formula
    # (no amplification by sampling secrecy) and must exceed the analyst's.
    from simulations.cli import main

    assert (
        main(["account", "gaussian", "--noise-multiplier", "1", "--sample-rate", "0.01", "--rounds", "100", "--json"])
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["observer"] == "analyst" and d["server"]["observer"] == "server"
    assert d["server"]["epsilon"] > d["epsilon"]
    assert main(["calibrate", "gaussian", "--epsilon", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["server"]["epsilon"] == d["epsilon"]  # no sampling: the same aggregate


def test_shuffle_json_names_both_observers(capsys):
    # Against a party that sees each report before shuffling only the Gaussian randomizer protects:
    # sigma = 5, sensitivity 1, T = 1 -> dp_accounting's RDP accountant on GaussianDpEvent(5) at orders 2..256.
    dpa = pytest.importorskip("dp_accounting")
    from simulations.cli import main

    assert (
        main(
            ["account", "shuffle-gaussian", "--n", "100", "--sigma", "5", "--rounds", "1", "--delta", "1e-5", "--json"]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["observer"] == "analyst" and d["server"]["observer"] == "server"
    acc = dpa.rdp.RdpAccountant(orders=[float(o) for o in range(2, 257)])
    acc.compose(dpa.GaussianDpEvent(5.0))
    assert d["server"]["epsilon"] == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert (
        main(
            [
                "account",
                "shuffled-checkin",
                "--n",
                "1000",
                "--gamma",
                "0.5",
                "--eps0",
                "1",
                "--delta0",
                "1e-6",
                "--rounds",
                "2",
                "--delta",
                "1e-5",
                "--json",
            ]
        )
        == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert d["server"]["epsilon"] is None  # (eps0, delta0)-LDP with delta0 > 0 has no RDP curve
