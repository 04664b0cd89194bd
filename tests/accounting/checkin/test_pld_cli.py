"""CLI tests for the PLD check-in accountant: 'account checkin --method pld' and 'calibrate checkin'."""

from __future__ import annotations

import json

from secagg_dp.accounting.checkin.pld import checkin_pld
from simulations.cli import main

BASE = ["account", "checkin", "--n", "10000", "--gamma", "0.1", "--sigma", "1", "--rounds", "10", "--delta", "1e-4"]


def test_default_method_is_pld_for_gaussian(capsys):
    assert main(BASE + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["method"] == "pld" and d["observer"] == "analyst" and d["certificate"] is True
    assert d["neighbouring"] == "replace-one"
    # reference table (tests/accounting/checkin/vectors), n = 10^4, gamma = 0.1, T = 10: tight 0.0455,
    # lower bound 0.0450; ours lies between (2% allowance above) and below the RDP-path certificates printed beside it
    assert 0.0450 <= d["epsilon"] <= 0.0455 * 1.02
    assert d["epsilon"] < d["epsilon_window"] < d["epsilon_rdp"]
    assert d["epsilon_optimistic"] <= d["epsilon"] == d["epsilon_pld"]


def test_rdp_flag_keeps_rdp_default_and_other_mechanisms_refuse_pld(capsys):
    assert main(BASE + ["--json", "--rdp", "--max-order", "32"]) == 0
    assert json.loads(capsys.readouterr().out)["method"] == "rdp"
    code = main(BASE + ["--mechanism", "ddg", "--method", "pld"])
    err = capsys.readouterr().err
    assert code == 2 and "'--method'" in err and "ddg" in err
    # the server view exists on the RDP path too (revealed participation flag): top level is its certificate
    assert main(BASE + ["--observer", "server", "--method", "rdp", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["observer"] == "server" and d["method"] == "rdp" and d["epsilon"] == d["server"]["epsilon"]


def test_server_observer_json(capsys):
    assert main(BASE + ["--observer", "server", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["observer"] == "server" and d["method"] == "pld"
    assert d["epsilon_rdp"] is None and d["epsilon_window"] is None  # analyst-only paths are not reported
    assert d["epsilon"] == checkin_pld(10000, 0.1, 1.0, 10, 1e-4, observer="server").epsilon


def test_calibrate_checkin_pld(capsys):
    argv = [
        "calibrate",
        "checkin",
        "--n",
        "1000",
        "--gamma",
        "0.1",
        "--rounds",
        "10",
        "--delta",
        "1e-5",
        "--epsilon",
        "0.5",
        "--method",
        "pld",
        "--json",
    ]
    assert main(argv) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["epsilon"] <= 0.5 and d["method"] == "pld"
    assert checkin_pld(1000, 0.1, d["sigma"] * 0.99, 10, 1e-5).epsilon > 0.5
    code = main(argv[:-5] + ["--epsilon", "0"])
    assert code == 2 and "--epsilon" in capsys.readouterr().err  # refused by the parser, naming the flag
