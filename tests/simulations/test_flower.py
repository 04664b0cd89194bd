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

from secagg_dp.errors import ParameterError
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


@pytest.mark.slow
@pytest.mark.parametrize(("mechanism", "security"), [("ddg", "semi-honest"), ("skellam", "active")])
def test_flower_simulation_equals_ideal_mode(tmp_path, mechanism, security):
    pytest.importorskip("flwr", reason="the flower extra is not installed")
    pytest.importorskip("ray", reason="Flower's Simulation Engine needs flwr[simulation] (ray)")
    env = dict(os.environ, PYTHONPATH=str(ROOT), RAY_DEDUP_LOGS="0")
    proc = subprocess.run(
        [sys.executable, str(APP / "run.py"), "--nodes", "4", "--sample", "4", "--rounds", "2", "--seed", "7"]
        + ["--mechanism", mechanism, "--security", security, "--out", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rounds = json.loads((tmp_path / "rounds.json").read_text())
    assert len(rounds) == 2
    sys.path.insert(0, str(APP))
    try:
        from task import DIM, local_train
    finally:
        sys.path.remove(str(APP))
    cfg = _cfg(dim=DIM, seed=7, mechanism=mechanism, security=security)
    for rec in rounds:
        w = np.asarray(rec["model"])
        updates = {p: local_train(w, p) - w for p in range(4)}  # every node is sampled (m = N)
        residues, decoded = ideal_round(cfg, updates, rec["round"])
        # bit for bit: the masks cancel exactly and each Flower client drew the ideal mode's rounding and noise
        assert rec["aggregate"] == residues.tolist()
        # and the decoded sum is the clipped updates' sum up to the noise (independent check of the decode:
        # 6 sigma of the total noise plus the codec's rounding bound, false-failure rate < 1e-8 per round)
        clipped = sum(u * min(1.0, cfg.clip / np.linalg.norm(u)) for u in updates.values())
        noise_std = cfg.noise_multiplier * cfg.clip
        bound = 6 * noise_std * math.sqrt(cfg.codec.padded_dim) + cfg.codec.decode_error_bound(4)
        assert np.linalg.norm(decoded - clipped) < bound
    assert "epsilon" in proc.stdout
    assert (tmp_path / "ledger.sqlite").is_file()
