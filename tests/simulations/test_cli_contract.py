"""CLI contract: bad input is one line + exit 2 naming the parameter; every --help example runs; one JSON schema."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shlex

import pytest

from simulations.cli import build_parser, main

G = ["account", "gaussian", "--noise-multiplier", "1"]
DDG = ["account", "ddg", "--clients", "10", "--dim", "8", "--bits", "20", "--clip", "1", "--noise-multiplier", "1"]
SK = ["account", "skellam", "--clients", "10", "--dim", "8", "--bits", "20", "--clip", "1", "--noise-multiplier", "1"]
CK = [
    "account",
    "checkin",
    "--n",
    "100",
    "--gamma",
    "0.1",
    "--sigma",
    "1",
    "--rounds",
    "2",
    "--delta",
    "1e-5",
    "--max-order",
    "16",
]
SG = [
    "account",
    "shuffle-gaussian",
    "--n",
    "100",
    "--sigma",
    "1",
    "--rounds",
    "2",
    "--delta",
    "1e-5",
    "--max-order",
    "16",
]
SC = [
    "account",
    "shuffled-checkin",
    "--n",
    "100",
    "--gamma",
    "0.1",
    "--rounds",
    "2",
    "--delta",
    "1e-5",
    "--max-order",
    "16",
]
CAL = ["calibrate", "gaussian", "--epsilon", "1"]
CALD = ["calibrate", "ddg", "--clients", "10", "--dim", "8", "--bits", "20", "--clip", "1", "--epsilon", "1"]

# (argv, a word the one-line error must contain): every documented command, several bad values each
BAD = [
    (G + ["--delta", "0"], "--delta"),
    (G + ["--delta", "2"], "--delta"),
    (G + ["--delta", "1"], "--delta"),
    (G + ["--delta", "nan"], "--delta"),
    (["account", "gaussian", "--noise-multiplier", "0"], "--noise-multiplier"),
    (["account", "gaussian", "--noise-multiplier", "-1"], "--noise-multiplier"),
    (["account", "gaussian", "--noise-multiplier", "inf"], "--noise-multiplier"),
    (["account", "gaussian", "--noise-multiplier", "abc"], "--noise-multiplier"),
    (G + ["--rounds", "-1"], "--rounds"),
    (G + ["--rounds", "1.5"], "--rounds"),
    (G + ["--sample-rate", "0"], "--sample-rate"),
    (G + ["--sample-rate", "1.5"], "--sample-rate"),
    (G + ["--population", "0"], "--population"),
    (G + ["--neighbouring", "swap"], "--neighbouring"),
    (G + ["--neighbouring", "replace-one", "--sample-rate", "0.1"], "add-remove"),
    (
        ["account", "ddg", "--clients", "0", "--dim", "8", "--bits", "20", "--clip", "1", "--noise-multiplier", "1"],
        "--clients",
    ),
    (DDG + ["--dim", "-4"], "--dim"),
    (DDG + ["--bits", "70"], "--bits"),
    (DDG + ["--clip", "0"], "--clip"),
    (DDG + ["--beta", "1"], "--beta"),
    (DDG + ["--k-stddevs", "-1"], "--k-stddevs"),
    (SK + ["--delta", "0"], "--delta"),
    (SK + ["--clients", "-3"], "--clients"),
    (CK + ["--dim", "-4", "--mechanism", "skellam"], "--dim"),
    (CK + ["--max-order", "100000"], "--max-order"),
    (CK + ["--delta", "0"], "--delta"),
    (CK + ["--gamma", "1.5"], "--gamma"),
    (CK + ["--sigma", "0"], "--sigma"),
    (CK + ["--rounds", "0"], "--rounds"),
    (["account", "checkin", "--n", "0", "--gamma", "0.1", "--sigma", "1", "--rounds", "1", "--delta", "1e-5"], "--n"),
    (SG + ["--sigma", "0"], "--sigma"),
    (SG + ["--max-order", "100000"], "--max-order"),
    (SG + ["--delta", "2"], "--delta"),
    (SC + ["--eps0", "0"], "--eps0"),
    (SC + ["--sigma", "1", "--eps0", "1"], "--sigma"),
    (SC + ["--eps0", "1000", "--method", "seed000-upper"], "eps0"),
    (SC + ["--gamma", "0", "--sigma", "1"], "--gamma"),
    (SC + ["--eps0", "1", "--delta0", "1"], "--delta0"),
    (CAL + ["--delta", "1"], "--delta"),
    (["calibrate", "gaussian", "--epsilon", "0"], "--epsilon"),
    (CALD + ["--clients", "0"], "--clients"),
    (["verify", "--seed", "abc"], "--seed"),
    (["verify", "--seed", "-1"], "--seed"),
    (["verify", "--trials", "0"], "--trials"),
    (["verify", "--trials", "100000"], "--trials"),
    (["simulate", "--seed", "abc"], "--seed"),
    (["simulate", "--config", "no-such-file.toml"], "no-such-file"),
    (["simulate", "bogus.key=1"], "bogus.key"),
    (["simulate", "rounds=0"], "rounds"),
    (["simulate", "secagg.threshold=1"], "secagg.threshold"),
    (["simulate", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
    (["simulate", "--executor", "dask", "--scheduler", "nonsense"], "--scheduler"),
    (["account"], "MECHANISM"),
    (["bogus"], "bogus"),
]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("argv,word", BAD, ids=[" ".join(a[:2]) + f" [{w}] {i}" for i, (a, w) in enumerate(BAD)])
def test_bad_input_is_one_line_exit_2_naming_the_parameter(argv, word, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(argv)
    assert code == 2, (argv, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert word in err, err
    assert not (tmp_path / "simulate-out").exists()  # refused before any work


def test_simulate_out_must_not_be_a_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("x")
    code, _, err = _run(["simulate", "--out", "taken", "--no-plots", "rounds=1"])
    assert code == 2 and "--out" in err and err.count("\n") == 1


def test_simulate_without_the_sim_extra_stops_before_any_round(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    code, _, err = _run(["simulate", "mode=ideal", "rounds=1"])
    assert code == 2 and "secagg-dp[sim]" in err and "--no-plots" in err
    assert not (tmp_path / "simulate-out").exists()


def _subparsers(parser):
    for action in parser._actions:
        if action.__class__.__name__ == "_SubParsersAction":
            yield from action.choices.values()


def _all_parsers(parser):
    yield parser
    for sub in _subparsers(parser):
        yield from _all_parsers(sub)


def _examples() -> list[str]:
    lines = []
    for p in _all_parsers(build_parser()):
        lines += [ln.strip() for ln in p.format_help().splitlines() if ln.strip().startswith("secagg-dp ")]
    return lines


def test_help_has_examples():
    assert len(_examples()) >= 5


@pytest.mark.parametrize("example", _examples())
def test_every_help_example_runs_as_written(example, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(shlex.split(example)[1:])
    assert code == 0, (example, err)
    assert "certified ε" in out and "results:" in out


# one JSON schema: every account command with --json --rdp
JSON_COMMANDS = [
    G + ["--rounds", "3"],
    DDG,
    SK,
    CK,
    SG,
    SG + ["--bound", "upper"],
    SC + ["--sigma", "1"],
    SC + ["--sigma", "1", "--method", "gaussian-upper"],
    G + ["--noise-multiplier", "1e-300"],
    CK + ["--sigma", "1e-200"],
]


def _strict(text: str) -> dict:
    def refuse(name):
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    "argv", JSON_COMMANDS, ids=lambda a: " ".join(a[:2]) + ("-tiny" if "e-" in " ".join(a) else "")
)
def test_json_schema_of_every_accountant(argv):
    code, out, _ = _run(argv + ["--json", "--rdp"])
    assert code == 0
    doc = _strict(out)
    for key in ("epsilon", "delta", "order", "method", "neighbouring", "rdp"):
        assert key in doc, key
    curve = doc["rdp"]
    assert set(curve) == {"orders", "values"} and len(curve["orders"]) == len(curve["values"]) > 0
    # integer orders are JSON integers; the default grid also has fractional orders (1.1, 2.5, ...)
    assert all(isinstance(o, (int, float)) and o > 1 for o in curve["orders"])
    assert all(v is None or (isinstance(v, float) and v >= 0) for v in curve["values"])
    if doc["epsilon"] is None:
        assert doc["epsilon_reason"] and doc["order"] is None
    else:
        assert isinstance(doc["epsilon"], float) and doc["epsilon"] >= 0 and isinstance(doc["order"], (int, float))
    assert doc["neighbouring"] in ("replace-one", "add-remove")


def test_calibrate_json_is_strict():
    code, out, _ = _run(CAL + ["--json"])
    doc = _strict(out)
    assert code == 0 and doc["epsilon"] <= 1.0 and doc["target_epsilon"] == 1.0


def test_aliases_mean_the_same():
    a = _strict(_run(["account", "gaussian", "--sigma", "2", "--json"])[1])
    b = _strict(_run(["account", "gaussian", "--noise-multiplier", "2", "--json"])[1])
    assert a == b
    c = _strict(_run(["account", "ddg", "--n", "10", *DDG[4:], "--json"])[1])
    d = _strict(_run([*DDG, "--json"])[1])
    assert c == d
    e = _strict(_run(["account", "checkin", "--clients", "100", *CK[4:], "--json"])[1])
    f = _strict(_run([*CK, "--json"])[1])
    assert e == f
