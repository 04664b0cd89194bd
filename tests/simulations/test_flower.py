"""The Flower path: the example app in Flower's Simulation Engine unmasks to exactly our ideal mode's sum.

The end-to-end test needs ``flwr[simulation]`` (the ``flower`` extra; CI installs it, see .ci/run) and is skipped
without it. The parts that need no ``flwr`` (configuration record, privacy event) are tested always.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from secagg_dp.errors import ParameterError, ProtocolError
from simulations.flower import FlowerDPConfig, ideal_round, round_event

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "flower_app"


def _cfg(**kw):
    base = dict(dim=10, clip=1.0, noise_multiplier=1.0, sample_size=4, population=4, threshold=3, seed=1)
    return FlowerDPConfig(**{**base, **kw})


def test_config_round_trips_through_a_flower_record():
    cfg = _cfg(neighbours=3, mechanism="skellam", seed=None)
    assert FlowerDPConfig.from_record(cfg.to_record()) == cfg
    assert cfg.sigma_int == pytest.approx(cfg.sigma_local * cfg.scale)


def test_bad_config_names_the_argument():
    with pytest.raises(ParameterError, match="sample_size"):
        _cfg(sample_size=5)
    with pytest.raises(ParameterError, match="mechanism"):
        _cfg(mechanism="gaussian")


def test_wide_modulus_keeps_the_grid_noise_in_the_samplers_range():
    """At 40 bits the codec's scale rule asks for a grid noise std far above what the samplers take; the
    config caps it at their limit (as the simulator's plan does), so a client can encode and noise."""
    from secagg_dp.noise import SIGMA_MAX
    from simulations.flower import encode_update

    cfg = _cfg(bits=40)
    assert cfg.sigma_int <= SIGMA_MAX
    assert cfg.sigma_int == pytest.approx(SIGMA_MAX)  # the cap is what binds at this width
    out = encode_update(cfg, np.ones(cfg.dim), np.random.default_rng(0))
    assert out.shape == (cfg.codec.padded_dim,) and int(out.max()) < 2**40


def test_round_event_is_fixed_size_sampling_and_pays_for_missing_noise():
    from secagg_dp.accounting.checkin import CheckinAccountant

    cfg = _cfg(population=100, sample_size=10, threshold=7)
    full, short = round_event(cfg, 10), round_event(cfg, 7)
    assert (full.sample_size, full.gamma, full.clients) == (10, None, 100)
    eps = [CheckinAccountant("rdp").compose(e, 5).get_epsilon(1e-5) for e in (full, short)]
    assert eps[1] > eps[0]  # 7 clients' noise is less noise
    # the server chose the sample: its view (revealed participation) is never below the analyst's
    server = CheckinAccountant("rdp", observer="server").compose(full, 5).get_epsilon(1e-5)
    assert server >= eps[0]


def test_pinned_client_refuses_other_privacy_parameters():
    from simulations.flower.client import _refusal

    pinned = _cfg(seed=None)
    assert _refusal(pinned, pinned) is None
    assert _refusal(_cfg(seed=None, threshold=4), pinned) is None  # a higher threshold is safer
    assert "noise_multiplier" in _refusal(_cfg(seed=None, noise_multiplier=0.5), pinned)
    assert "threshold" in _refusal(_cfg(seed=None, threshold=2), pinned)
    assert "sample_size" in _refusal(_cfg(seed=None, sample_size=3, threshold=2), pinned)
    assert "neighbours" in _refusal(_cfg(seed=None, neighbours=2), pinned)
    assert "seed" in _refusal(_cfg(seed=5), pinned)  # a seed the server knows keys the noise
    own = _cfg(**SECAGGPLUS, min_roster=18)
    assert "min_roster" in _refusal(_cfg(**SECAGGPLUS, min_roster=10), own)


# -- what a pinned client takes from its own config (no flwr needed) ------------------------------------------
# An active SecAgg+ client of m = 20 sampled nodes with degree 6 and threshold 5 (t > (k + 1)/2 = 3.5),
# expecting at least 18 of the 20 in the roster (2 dropouts planned for).
SECAGGPLUS = dict(sample_size=20, population=40, threshold=5, neighbours=6, security="active", seed=None)


def _plan(pinned, **kw):
    """The round plan an honest server sends for ``pinned`` (the values written out, not taken from the
    code under test), with ``kw`` changed."""
    from protocols.pool import RoundPlan

    base = dict(
        bits=20, dim=16, threshold=5, neighbours=6, security="active", round_id=bytes(16), min_roster=18, clients=20
    )
    assert pinned.codec.padded_dim == 16  # dim 10 rotated: the next power of two
    return RoundPlan(**{**base, **kw})


def test_active_secaggplus_config_needs_min_roster():
    with pytest.raises(ParameterError, match="Argument 'min_roster' is required"):
        _cfg(**SECAGGPLUS)
    with pytest.raises(ParameterError, match="min_roster"):
        _cfg(**SECAGGPLUS, min_roster=21)  # more than the m sampled nodes
    _cfg(**{**SECAGGPLUS, "security": "semi-honest"})  # the trusted-server mode needs none
    _cfg(**{**SECAGGPLUS, "neighbours": 19})  # k >= m - 1: the full graph, whose floor is t


def test_pinned_policy_is_the_clients_own():
    from protocols.security import ClientPolicy

    pinned = _cfg(**SECAGGPLUS, min_roster=18)
    assert FlowerDPConfig.from_record(pinned.to_record()) == pinned
    want = ClientPolicy(security="active", min_threshold=5, neighbours=6, min_roster=18, max_clients=20)
    assert pinned.client_policy() == want
    # k >= m - 1 runs the full graph (as run_pooled_round does): the client expects exactly that
    assert _cfg(**{**SECAGGPLUS, "neighbours": 19}).client_policy().neighbours is None


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"neighbours": 8}, "neighbours = 8; this client is pinned to 6"),  # a larger k: fewer colluders needed
        ({"neighbours": None}, "neighbours = None"),
        ({"min_roster": 8}, "min_roster 8 < the pinned 18"),  # the hand-picked small roster
        ({"min_roster": None}, "min_roster None < the pinned 18"),
        ({"threshold": 4}, "threshold 4 < the pinned 5"),
        ({"security": "semi-honest"}, "security = 'semi-honest'"),
        ({"bits": 24}, "bits = 24"),
        ({"dim": 32}, "dim = 32"),
        ({"seed": 3}, "seeded"),  # every key of the client would follow from a number the server knows
    ],
)
def test_pinned_client_refuses_a_server_plan_that_differs(change, why):
    from simulations.flower.client import round_policy

    pinned = _cfg(**SECAGGPLUS, min_roster=18)
    assert round_policy(_plan(pinned), pinned) == pinned.client_policy()
    # a plan asking for more (a higher threshold or minimum roster) is taken, with the client's own policy
    assert round_policy(_plan(pinned, threshold=6, min_roster=20), pinned) == pinned.client_policy()
    with pytest.raises(ProtocolError, match=why):
        round_policy(_plan(pinned, **change), pinned)


def test_unpinned_client_refuses_an_active_round():
    from simulations.flower.client import round_policy

    pinned = _cfg(**SECAGGPLUS, min_roster=18)
    with pytest.raises(ProtocolError, match="make_secagg_dp_mod"):
        round_policy(_plan(pinned), None)
    semi = _plan(pinned, security="semi-honest", min_roster=None)
    assert round_policy(semi, None).security == "semi-honest"  # trusted server: its plan, as documented


def _run_app(tmp_path, *args):
    pytest.importorskip("flwr", reason="the flower extra is not installed")
    pytest.importorskip("ray", reason="Flower's Simulation Engine needs flwr[simulation] (ray)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, str(APP / "run.py"), *args, "--out", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    sys.path.insert(0, str(APP))
    try:
        from task import DIM, local_train
    finally:
        sys.path.remove(str(APP))
    return proc, json.loads((tmp_path / "rounds.json").read_text()), DIM, local_train


def _check_round(cfg, rec, partitions, local_train):
    w = np.asarray(rec["model"])
    updates = {p: local_train(w, p) - w for p in partitions}
    residues, decoded = ideal_round(cfg, updates, rec["round"])
    # bit for bit: the masks cancel exactly and each Flower client drew the ideal mode's rounding and noise
    assert rec["aggregate"] == residues.tolist()
    # and the decoded sum is the clipped updates' sum up to the noise (independent check of the decode:
    # 6 sigma of the total noise plus the codec's rounding bound, false-failure rate < 1e-8 per round)
    clipped = sum(u * min(1.0, cfg.clip / np.linalg.norm(u)) for u in updates.values())
    noise_std = cfg.noise_multiplier * cfg.clip
    bound = 6 * noise_std * math.sqrt(cfg.codec.padded_dim) + cfg.codec.decode_error_bound(len(partitions))
    assert np.linalg.norm(decoded - clipped) < bound


@pytest.mark.slow
@pytest.mark.parametrize(("mechanism", "security"), [("ddg", "semi-honest"), ("skellam", "active")])
def test_flower_simulation_equals_ideal_mode(tmp_path, mechanism, security):
    args = ["--nodes", "4", "--sample", "4", "--rounds", "2", "--seed", "7", "--mechanism", mechanism]
    proc, rounds, dim, local_train = _run_app(tmp_path, *args, "--security", security)
    cfg = _cfg(dim=dim, seed=7, mechanism=mechanism, security=security)
    assert [r["round"] for r in rounds] == [0, 1] and all(r["included"] == 4 for r in rounds)
    for rec in rounds:
        _check_round(cfg, rec, range(4), local_train)
    assert "epsilon" in proc.stdout
    assert (tmp_path / "ledger.sqlite").is_file()


@pytest.mark.slow
def test_flower_active_secaggplus_with_pinned_clients_equals_ideal_mode(tmp_path):
    # each client runs its own policy (k = 4 < m - 1 = 5, t = 5, min_roster 6), which the honest server's
    # plan matches: no client refuses, and the round unmasks to the ideal mode's residues
    args = ["--nodes", "6", "--sample", "6", "--rounds", "1", "--seed", "11", "--security", "active"]
    _, rounds, dim, local_train = _run_app(tmp_path, *args, "--neighbours", "4", "--min-roster", "6")
    cfg = _cfg(
        dim=dim, seed=11, sample_size=6, population=6, threshold=5, neighbours=4, security="active", min_roster=6
    )
    assert cfg.client_policy().neighbours == 4  # SecAgg+, not the full graph
    (rec,) = rounds
    assert rec["included"] == 6
    _check_round(cfg, rec, range(6), local_train)


@pytest.mark.slow
def test_flower_dropout_is_left_out_and_costs_privacy(tmp_path):
    # partition 2 fails in train: its node is silent from the start, so its data and noise are not in the sum
    args = ["--nodes", "5", "--sample", "5", "--threshold", "4", "--rounds", "1", "--seed", "3", "--fail", "2"]
    _, rounds, dim, local_train = _run_app(tmp_path, *args)
    (rec,) = rounds
    assert rec["included"] == 4
    cfg = _cfg(dim=dim, seed=3, sample_size=5, population=5, threshold=4)
    _check_round(cfg, rec, [0, 1, 3, 4], local_train)
    # the ledger spent the round with the noise actually delivered (4 of 5 clients' shares): more than planned
    from secagg_dp.accounting.checkin import CheckinAccountant
    from simulations.privacy import ORDERS  # the ledger's orders

    full, short = (
        CheckinAccountant("rdp", orders=ORDERS).compose(round_event(cfg, k)).get_epsilon(cfg.delta) for k in (5, 4)
    )
    assert rec["epsilon"] == pytest.approx(short, rel=1e-9) and short > full


# ---- SecAggDPAccountant against Flower's own protocol and RdpAccountant (needs flwr; dp-accounting is ours) ----


def _flower_accounting():
    pytest.importorskip("flwr", reason="the flower extra is not installed")
    import flwr.serverapp as fs

    if not hasattr(fs, "PrivacyAccountant"):
        pytest.skip("this flwr has no privacy accounting (added in Flower 1.35)")
    return fs


def test_secaggdp_accountant_satisfies_flowers_privacy_accountant_protocol():
    """Flower's PrivacyAccountant is a typing Protocol that is not runtime-checkable: a runtime-checkable
    sub-protocol checks that every member is there, and each method's parameters (names, kinds, defaults) are
    compared with the Protocol's. (mypy in the flwr environment checks the assignment statically: docs/flower.md.)"""
    import inspect
    from typing import Protocol, runtime_checkable

    fs = _flower_accounting()
    from simulations.flower.accountant import SecAggDPAccountant

    @runtime_checkable
    class Checkable(fs.PrivacyAccountant, Protocol):  # type: ignore[misc,name-defined]
        pass

    cfg = fs.PrivacyConfig(1e-5, 100, fs.NeighboringRelation.REPLACE_ONE, fs.SamplingMethod.WITHOUT_REPLACEMENT, 4.0)
    acc = SecAggDPAccountant(cfg)
    assert isinstance(acc, Checkable)
    assert not isinstance(object(), Checkable)  # the check can fail
    members = [m for m in vars(fs.PrivacyAccountant) if not m.startswith("_")]
    assert set(members) >= {"config", "num_releases", "compose", "would_exceed", "state_dict", "load_state_dict"}
    for name in members:
        theirs = inspect.getattr_static(fs.PrivacyAccountant, name)
        ours = inspect.getattr_static(SecAggDPAccountant, name)
        if isinstance(theirs, property):
            assert isinstance(ours, property), name
            continue
        want = [(p.name, p.kind, p.default) for p in inspect.signature(theirs).parameters.values()]
        got = [(p.name, p.kind, p.default) for p in inspect.signature(ours).parameters.values()]
        assert got == want, name
    # flwr present: the config and the spend are flwr's own dataclasses
    assert acc.config == cfg and type(acc.config) is fs.PrivacyConfig
    acc.compose(fs.GaussianPrivacyEvent(1.0, 10, 100))
    spent = acc.get_privacy_spent()
    assert type(spent) is fs.PrivacySpent and spent.num_releases == 1 and spent.delta == 1e-5


@pytest.mark.slow  # ~6-9 s each, nearly all in Flower's RdpAccountant (dp-accounting's bounds up to order 1024)
@pytest.mark.parametrize("model", ["poisson", "without-replacement"])
def test_secaggdp_accountant_never_above_flowers_rdp_accountant(model):
    """The same GaussianPrivacyEvents through Flower's RdpAccountant and ours. Relation as Flower defines it:
    Poisson sampling with add-or-remove-one, sampling without replacement with replace-one, noise_multiplier the
    noise std over the sensitivity under that relation (both hand dp-accounting / our core GaussianDpEvent(z)).
    Our orders contain Flower's, so our epsilon is at most theirs (1e-12 relative: float rounding of the same
    formulas) and close to it."""
    fs = _flower_accounting()
    pytest.importorskip("dp_accounting")
    from simulations.flower.accountant import SecAggDPAccountant

    rel = fs.NeighboringRelation.ADD_OR_REMOVE_ONE if model == "poisson" else fs.NeighboringRelation.REPLACE_ONE
    cfg = fs.PrivacyConfig(1e-5, 200, rel, fs.SamplingMethod(model), max_epsilon=8.0)
    theirs, ours = fs.RdpAccountant(cfg), SecAggDPAccountant(cfg)
    sequence = [(fs.GaussianPrivacyEvent(1.1, 20, 200), 30), (fs.GaussianPrivacyEvent(0.9, 5, 200), 10)]
    sequence.append((fs.GaussianPrivacyEvent(2.5, 60, 200), 5))
    for ev, count in sequence:
        theirs.compose(ev, count)
        ours.compose(ev, count)
    for delta in (1e-3, 1e-5, 1e-8):
        mine, flower = ours.get_epsilon(delta), theirs.get_epsilon(delta)
        assert mine <= flower * (1 + 1e-12), (delta, mine, flower)
        assert mine == pytest.approx(flower, rel=0.02)
    assert ours.num_releases == theirs.num_releases == 45
    nxt = fs.GaussianPrivacyEvent(1.1, 20, 200)
    for limit in (theirs.get_epsilon(1e-5) * 1.5, theirs.get_epsilon(1e-5) * 0.9):
        assert ours.would_exceed(nxt, limit) == theirs.would_exceed(nxt, limit)


@pytest.mark.slow  # ~50 s: mypy follows flwr, numpy and our package
def test_mypy_accepts_secaggdp_accountant_as_flowers_privacy_accountant(tmp_path):
    """The static form of the protocol check (PrivacyAccountant is not runtime-checkable): mypy accepts our
    accountant where Flower's Protocol is expected and rejects a class without its members (the check bites)."""
    _flower_accounting()
    pytest.importorskip("mypy", reason="mypy is in the test extra")
    src = tmp_path / "check_protocol.py"
    src.write_text(
        "from flwr.serverapp import NeighboringRelation, PrivacyAccountant, PrivacyConfig, SamplingMethod\n"
        "from simulations.flower.accountant import SecAggDPAccountant\n"
        "cfg = PrivacyConfig(1e-5, 100, NeighboringRelation.REPLACE_ONE, SamplingMethod.WITHOUT_REPLACEMENT)\n"
        "ours: PrivacyAccountant = SecAggDPAccountant(cfg)\n"
        "class Broken:\n"
        "    pass\n"
        "bad: PrivacyAccountant = Broken()\n"
    )
    args = ["--follow-imports=silent", "--ignore-missing-imports", "--no-incremental", str(src)]
    out = subprocess.run(
        [sys.executable, "-m", "mypy", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        timeout=600,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 1 and "check_protocol.py:7:" in errors[0] and '"Broken"' in errors[0], out.stdout
