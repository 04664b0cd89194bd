"""What the shuffle commands' epsilons are called: never "lower", since an RDP lower bound converted by the
upper-bound RDP->DP conversion (Canonne, Kamath & Steinke 2020, Prop. 12) bounds epsilon in neither direction."""

from __future__ import annotations

import contextlib
import io
import json
import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from simulations.cli import build_parser, main
from simulations.cli.account_shuffle import _GAUSS_METHODS, _LDP_METHODS

_COMMON = ["--n", "40", "--rounds", "3", "--delta", "1e-5", "--max-order", "8"]
_CHECKIN = ["account", "shuffled-checkin", "--gamma", "0.2", *_COMMON]

# every invocation of every shuffle subcommand that prints an epsilon: all --bound values and all --method values
_CASES: dict[str, list[list[str]]] = {
    "shuffle-gaussian": [
        ["account", "shuffle-gaussian", "--sigma", "2", *_COMMON, "--bound", b, *c]
        for b in ("lower", "upper")
        for c in ([], ["--conversion", "mironov"])
    ],
    "shuffled-checkin": [[*_CHECKIN, "--sigma", "2", "--method", m] for m in _GAUSS_METHODS]
    + [
        [*_CHECKIN, "--eps0", "1", "--delta0", "0" if m.startswith("seed000") else "1e-9", "--method", m]
        for m in _LDP_METHODS
    ],
}


def _run(argv: list[str]) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert main(argv) == 0, argv
    return buf.getvalue()


def test_every_shuffle_subcommand_is_covered():
    # a new shuffle subcommand (e.g. an ``account ldp-shuffle``) must be added to _CASES to be checked below
    parser = build_parser()
    account = next(a for a in parser._subparsers._group_actions[0].choices["account"]._actions if a.dest == "mechanism")
    assert {name for name in account.choices if "shuffle" in name} == set(_CASES)


@pytest.mark.parametrize("argv", [argv for cases in _CASES.values() for argv in cases], ids=" ".join)
def test_no_epsilon_is_labelled_lower(argv):
    doc = json.loads(_run([*argv, "--json", "--rdp"]))
    assert doc["bound"] in ("upper", "rdp-lower", "estimate"), doc["bound"]
    assert doc["certificate"] is (doc["bound"] == "upper")
    if doc["bound"] == "rdp-lower":
        # the caveat says what the number is; the RDP curve (when printed) is the lower bound
        assert any("neither an upper nor a lower bound on the mechanism's epsilon" in c for c in doc["caveats"])
        assert doc["rdp_bound"] == "lower"
    if "rdp" in doc:
        assert doc["rdp_bound"] in ("upper", "lower", "estimate")
    # the one epsilon labelled "lower" is the proven lower bound of shuffle-gaussian, in its own key
    assert ("epsilon_lower" in doc) == (argv[1] == "shuffle-gaussian")
    if "epsilon_lower" in doc:
        assert doc["epsilon_lower"]["bound"] == "lower" and doc["epsilon_lower"]["certificate"] is False
    first = _run(argv).splitlines()[0]
    assert f"bound={doc['bound']} " in first and "bound=lower" not in first


def test_pair_lower_methods_are_rdp_lower():
    # the two pair lower bounds and the draft's binary-RR lower bound: all three epsilons are "rdp-lower"
    for argv in (_CASES["shuffle-gaussian"][0], [*_CHECKIN, "--sigma", "2", "--method", "pair-lower"]):
        assert json.loads(_run([*argv, "--json"]))["bound"] == "rdp-lower"
    seed = [*_CHECKIN, "--eps0", "1", "--method", "seed000-lower", "--json"]
    assert json.loads(_run(seed))["bound"] == "rdp-lower"


def test_rdp_lower_epsilon_is_not_a_lower_bound():
    # With n = 1 the shuffle is the identity and the pair is the worst case, so the "lower" RDP curve is the
    # exact Gaussian RDP. Its conversion still exceeds the exact epsilon of T rounds of the Gaussian mechanism
    # (sigma/sqrt(T), sensitivity 1), from the analytic Gaussian delta(eps) of Balle & Wang 2018, Thm 8:
    # so the converted figure is not a lower bound on the mechanism's epsilon.
    sigma, rounds, delta = 2.0, 3, 1e-5
    argv = ["account", "shuffle-gaussian", "--n", "1", "--sigma", str(sigma), "--rounds", str(rounds)]
    doc = json.loads(_run([*argv, "--delta", str(delta), "--max-order", "256", "--json"]))
    s = sigma / math.sqrt(rounds)

    def gap(eps: float) -> float:
        return norm.cdf(-eps * s + 1 / (2 * s)) - math.exp(eps) * norm.cdf(-eps * s - 1 / (2 * s)) - delta

    exact = brentq(gap, 0.0, 50.0, xtol=1e-12)
    assert doc["bound"] == "rdp-lower"
    assert doc["epsilon"] > exact + 0.05, (doc["epsilon"], exact)
