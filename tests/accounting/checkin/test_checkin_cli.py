"""CLI tests for 'secagg-dp account checkin' (flags and JSON keys from issue 5)."""

from __future__ import annotations

import json

import pytest

from simulations.cli import main


def _run(capsys, argv):
    code = main(argv)
    return code, capsys.readouterr()


KNOWN = [
    "account",
    "checkin",
    "--n",
    "10000",
    "--gamma",
    "0.1",
    "--sigma",
    "1",
    "--mechanism",
    "gaussian",
    "--rounds",
    "100",
    "--delta",
    "1e-4",
    "--max-order",
    "64",
    "--json",
    "--rdp",
]


def test_json_keys_and_known_answer(capsys):
    # issue 5 known answer (Theorem 9 capped by base): 2.204708 at order 6
    code, out = _run(capsys, KNOWN + ["--amplification", "thm9"])
    assert code == 0
    d = json.loads(out.out)
    for key in ("epsilon", "delta", "order", "method", "neighbouring", "rdp"):
        assert key in d
    assert d["neighbouring"] == "replace-one" and d["method"] == "rdp" and d["amplification"] == "thm9"
    assert abs(d["epsilon"] - 2.204708) < 5e-7 and d["order"] == 6
    assert d["rdp"]["orders"] == list(range(2, 65)) and len(d["rdp"]["values"]) == 63
    # default: Theorem 27 for the Gaussian, a smaller certificate with the same keys
    code, out = _run(capsys, KNOWN)
    d27 = json.loads(out.out)
    assert code == 0 and d27["amplification"] == "auto" and d27["epsilon"] < d["epsilon"] - 0.1


def test_p_dropout_and_window_method(capsys):
    # gamma = p (1 - p') with --dropout-stages 1 (the single-dropout model)
    code, out = _run(
        capsys,
        [
            "account",
            "checkin",
            "--n",
            "10000",
            "--p",
            "0.2",
            "--dropout",
            "0.5",
            "--dropout-stages",
            "1",
            "--sigma",
            "1",
            "--rounds",
            "100",
            "--delta",
            "1e-4",
            "--max-order",
            "64",
            "--method",
            "window",
            "--json",
        ],
    )
    d = json.loads(out.out)
    assert code == 0 and d["method"] == "window" and d["gamma"] == pytest.approx(0.1)
    assert "rdp" not in d


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_human_output_side_by_side(capsys):
    code, out = _run(
        capsys,
        [
            "account",
            "checkin",
            "--n",
            "2000",
            "--gamma",
            "0.05",
            "--sigma",
            "1",
            "--rounds",
            "10",
            "--delta",
            "1e-5",
            "--max-order",
            "32",
            "--baselines",
        ],
    )
    assert code == 0
    assert "full mixture (rdp)" in out.out and "window certificate" in out.out and "baseline" in out.out


def test_bad_input_clear_error(capsys):
    code, out = _run(
        capsys, ["account", "checkin", "--n", "100", "--p", "0.2", "--sigma", "1", "--rounds", "1", "--delta", "1e-5"]
    )
    assert code == 2 and "dropout" in out.err
    code, out = _run(
        capsys,
        ["account", "checkin", "--n", "100", "--gamma", "0.2", "--sigma", "-1", "--rounds", "1", "--delta", "1e-5"],
    )
    assert code == 2 and "sigma" in out.err


def test_local_steps_flags(capsys):
    code, out = _run(
        capsys,
        [
            "account",
            "checkin",
            "--n",
            "500",
            "--gamma",
            "0.1",
            "--sigma",
            "1",
            "--rounds",
            "5",
            "--delta",
            "1e-5",
            "--local-steps",
            "4",
            "--sample-rate",
            "0.1",
            "--max-order",
            "32",
            "--json",
        ],
    )
    d = json.loads(out.out)
    assert code == 0 and d["neighbouring"] == "add-remove" and d["unit"] == "sample"


@pytest.mark.slow  # over 5 s: runs in CI, not in the quick loop
def test_both_observers_in_json_and_text(capsys):
    args = [
        "account",
        "checkin",
        "--n",
        "1000",
        "--gamma",
        "0.1",
        "--sigma",
        "1",
        "--rounds",
        "10",
        "--delta",
        "1e-5",
        "--max-order",
        "64",
    ]
    code, out = _run(capsys, args + ["--json"])
    d = json.loads(out.out)
    assert code == 0 and d["observer"] == "analyst" and d["certificate"] is True
    assert d["server"]["observer"] == "server" and d["server"]["epsilon"] > d["epsilon"]
    assert d["server_ex_post"]["ex_post"] is True
    code, out = _run(capsys, args)
    assert "observer analyst" in out.out and "observer server" in out.out and "ex-post" in out.out


def test_local_steps_comparison_is_labelled_not_a_certificate(capsys):
    # The counterexample configuration: the certificate must exceed the labelled joint-noise value 1.916.
    code, out = _run(
        capsys,
        [
            "account",
            "checkin",
            "--n",
            "10",
            "--gamma",
            "1",
            "--sigma",
            "1",
            "--local-steps",
            "2",
            "--sample-rate",
            "1",
            "--rounds",
            "1",
            "--delta",
            "1e-5",
            "--json",
        ],
    )
    d = json.loads(out.out)
    assert code == 0 and d["comparison"]["bound"] == "seed-004 (not an upper bound)"
    assert d["comparison"]["certificate"] is False and d["comparison"]["epsilon"] == pytest.approx(1.916, abs=1e-3)
    assert d["certificate"] is True and d["epsilon"] > d["comparison"]["epsilon"]


def test_dropout_stages_flag(capsys):
    base = [
        "account",
        "checkin",
        "--n",
        "5",
        "--p",
        "0.9",
        "--dropout",
        "0.1",
        "--sigma",
        "1",
        "--rounds",
        "1",
        "--delta",
        "1e-5",
        "--json",
    ]
    code, out = _run(capsys, base)
    assert code == 0 and json.loads(out.out)["gamma"] == pytest.approx(0.9 * 0.9**3)
    code, out = _run(capsys, base + ["--dropout-stages", "1"])
    assert code == 0 and json.loads(out.out)["gamma"] == pytest.approx(0.81)
    code, out = _run(capsys, base + ["--dropout-stages", "0"])
    assert code == 2 and "dropout-stages" in out.err  # the parser names the flag


def test_pld_beside_rdp_on_a_worker_prints_what_one_after_the_other_prints(capsys, monkeypatch):
    # With an idle CPU the PLD pair runs on a worker thread while the RDP lines are computed; without, one after
    # the other. The oracle is the sequential run: every printed number must be the same, in text and JSON.
    import secagg_dp._parallel as par

    argv = "account checkin --n 2000 --gamma 0.05 --sigma 1 --rounds 10 --delta 1e-6 --max-order 64".split()
    outs = {}
    for cpus in (1, 2):
        monkeypatch.setattr(par, "idle_cpus", lambda limit, cpus=cpus: min(cpus, limit))
        outs[cpus] = [_run(capsys, argv)[1].out, _run(capsys, [*argv, "--json"])[1].out]
    assert outs[1] == outs[2]
    assert json.loads(outs[2][1])["method"] == "pld"


def test_explicit_pld_error_still_comes_first_with_the_worker(capsys, monkeypatch):
    # too little noise for the PLD grid: with --method pld that error is reported (exit 2), not an RDP result
    import secagg_dp._parallel as par

    argv = "account checkin --n 1000 --gamma 0.1 --sigma 0.001 --rounds 1 --delta 1e-6 --method pld".split()
    for cpus in (1, 2):
        monkeypatch.setattr(par, "idle_cpus", lambda limit, cpus=cpus: min(cpus, limit))
        code, out = _run(capsys, argv)
        assert code == 2 and "out of the PLD grid" in out.err
