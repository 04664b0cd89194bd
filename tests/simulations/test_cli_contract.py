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


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


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
