"""Every bad input ever reported, in one table per surface: the CLI and the Python entry points.

A bad input ends as one line on stderr (``secagg-dp CMD: error: ...`` or ``secagg-dp: error: ...``), exit code 2,
naming the parameter, before any work (no ``simulate-out`` folder appears); a Python entry point raises one
:class:`~secagg_dp.errors.SecAggDPError` (``ParameterError``/``ConfigError``) whose one-line message names the
parameter. Inputs once reported as crashes that have a well-defined answer (an infinite epsilon) are in
``NO_LONGER_CRASH``: exit 0, no traceback, the text and JSON outputs agree. CLI cases run in-process.
"""

from __future__ import annotations

import numpy as np
import pytest

from secagg_dp.errors import SecAggDPError
from tests.simulations.test_cli_contract import CAL, CALD, CK, DDG, SC, SG, SK, G, _run

# (argv, a word the one-line error must contain): every documented command, several bad values each
CLI_BAD = [
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
    # n = 1e13 once allocated 86.9 GiB (an 11-million-count exact core): now refused with the limit named
    (
        ["account", "checkin", "--n", "1e13", "--gamma", "0.1", "--sigma", "1", "--mechanism", "gaussian"]
        + ["--rounds", "1", "--delta", "1e-5"],
        "'n'",
    ),
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
    (["simulate", "--config", "no-such-scenario"], "does not exist"),
    (["simulate", "bogus.key=1"], "bogus.key"),
    (["simulate", "nonsense=1"], "Unknown config key 'nonsense'"),
    (["simulate", "rounds=0"], "rounds"),
    (["simulate", "population.checkin=2"], "population.checkin"),
    (["simulate", "secagg.threshold=1"], "secagg.threshold"),
    (["simulate", "secagg.threshold=500"], "secagg.threshold"),
    (["simulate", "secagg.bits=3"], "secagg.bits"),
    (["simulate", "population.clients=60.0"], "population.clients"),  # integers are integers in a config too
    (["simulate", "population.clients=true"], "population.clients"),
    (["simulate", "population.checkin=nan"], "population.checkin"),
    (["simulate", 'privacy.clip="big"'], "privacy.clip"),
    (["simulate", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:1"], "--scheduler"),
    (["simulate", "--executor", "dask", "--scheduler", "nonsense"], "--scheduler"),
    # an output folder that cannot be created (its parent is missing in /proc) once ended in a traceback
    (["simulate", "--out", "/proc/no-such-dir/out", "--no-plots", "rounds=1"], "--out"),
    (["account"], "MECHANISM"),
    (["bogus"], "bogus"),
]


@pytest.mark.parametrize(
    "argv,word", CLI_BAD, ids=[" ".join(a[:2]) + f" [{w}] {i}" for i, (a, w) in enumerate(CLI_BAD)]
)
def test_cli_bad_input_is_one_line_exit_2_naming_the_parameter(argv, word, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _run(argv)
    assert code == 2, (argv, out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert word in err, err
    assert not (tmp_path / "simulate-out").exists()  # refused before any work


@pytest.mark.parametrize("out", ["taken", "taken/sub"])
def test_cli_out_file_in_the_way_is_refused(out, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken").write_text("x")
    code, _, err = _run(["simulate", "--out", out, "--no-plots", "rounds=1"])
    assert code == 2 and "--out" in err and err.count("\n") == 1 and "Traceback" not in err


# Inputs whose answer is epsilon = inf: once a traceback in the text output ('Unknown format code'), never in --json.
NO_LONGER_CRASH = [
    G + ["--noise-multiplier", "1e-300"],
    G + ["--noise-multiplier", "1e-200"],
    G + ["--noise-multiplier", "1e-300", "--sample-rate", "0.01"],
    G + ["--noise-multiplier", "1e-300", "--sample-rate", "0.01", "--rdp"],
    DDG + ["--noise-multiplier", "1e-300"],
    SK + ["--noise-multiplier", "1e-300", "--sample-rate", "0.1"],
]


@pytest.mark.parametrize("argv", NO_LONGER_CRASH, ids=lambda a: " ".join(a[3:]))
def test_cli_infinite_epsilon_is_printed_not_a_traceback(argv):
    import json

    code, out, err = _run(argv)
    assert code == 0 and "Traceback" not in err, err
    assert "epsilon = inf" in out and "observer analyst" in out and "observer server" in out
    code, js, _ = _run([a for a in argv if a != "--rdp"] + ["--json"])
    doc = json.loads(js)
    assert code == 0 and doc["epsilon"] is None and doc["order"] is None
    assert doc["server"]["epsilon"] == "inf" and doc["server"]["order"] is None


def _round(**kw):
    from protocols.round import run_secagg_round

    inputs = {i: np.zeros(4, dtype=np.uint64) for i in range(8)}
    return run_secagg_round(inputs, bits=16, **{"threshold": 7, "seed": 1, **kw})


def _policy(**kw):
    from protocols.security import ClientPolicy

    return ClientPolicy(**kw)


def _mixture(n, gamma):
    from secagg_dp.accounting.checkin.bases import GaussianSum
    from secagg_dp.accounting.checkin.mixture import SubsampledCheckin, checkin_epsilon

    return checkin_epsilon(SubsampledCheckin(GaussianSum(1.0), n), n, gamma, 1, 1e-5)


def _pld(n, gamma):
    from secagg_dp.accounting.checkin.pld import checkin_pld

    return checkin_pld(n, gamma, 1.0, 1, 1e-5)


def _acct():
    from secagg_dp import accounting

    return accounting


def _config(raw):
    from simulations.config import build_config

    return build_config(raw)


# (call, a word the one-line message must contain)
PY_BAD = [
    (lambda: _round(threshold=7.0), "threshold"),  # integers are integers: 7.0 was accepted
    (lambda: _round(threshold=True), "threshold"),
    (lambda: _round(neighbours=4.0, threshold=3, security="semi-honest"), "neighbours"),
    (lambda: _round(seed=1.0), "seed"),
    (lambda: _round(dropouts={"nowhere": {1}}), "dropouts"),
    (lambda: _policy(min_threshold=3.0), "min_threshold"),
    (lambda: _policy(neighbours=4.0), "neighbours"),
    (lambda: _mixture(10**13, 0.1), "'n'"),  # once an 86.9 GiB allocation
    (lambda: _pld(10**13, 0.1), "'n'"),  # once a hang in the binomial window
    (lambda: _mixture(0, 0.1), "'n'"),
    (lambda: _mixture(100, 1.5), "'gamma'"),
    (lambda: _acct().Gaussian(sigma=0.0, l2_sensitivity=1.0, neighbouring="add-remove"), "'sigma'"),
    (lambda: _acct().Gaussian(sigma=1.0, l2_sensitivity=1.0, neighbouring="swap"), "'neighbouring'"),
    (lambda: _acct().rdp_to_dp([2, 3], [0.1, 0.2], -1.0), "'delta'"),
    (lambda: _acct().effective_checkin_rate(1.5, 0.1), "'p'"),
    (lambda: _acct().checkin_provider("laplace", 10, sigma=1.0, l2_sensitivity=1.0), "'mechanism'"),
    (lambda: _acct().checkin_provider("ddg", 10, sigma=1.0, l2_sensitivity=1.0, sample_rate=0.5), "'sample_rate'"),
    (lambda: _config({"population": {"clients": 60.0}}), "population.clients"),
    (lambda: _config({"secagg": {"threshold": 7.0}}), "secagg.threshold"),
]


@pytest.mark.parametrize("call,word", PY_BAD, ids=[f"{w} {i}" for i, (_, w) in enumerate(PY_BAD)])
def test_python_bad_input_is_one_error_naming_the_parameter(call, word):
    with pytest.raises(SecAggDPError) as info:
        call()
    msg = str(info.value)
    assert "\n" not in msg and word in msg, msg
