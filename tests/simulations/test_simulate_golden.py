"""Every recorded figure of small seeded ``simulate`` runs, compared exactly with a fixture recorded before the
round's plan and its noise enforcement moved into the library (``secagg_dp.plan``, ``NoiseSpec``).

The fixture ``data/simulate_golden.json`` holds, per case, the config overrides and the whole ``results.json``
of :func:`simulations.runner.run_scenario` minus its wall-clock fields (every ``seconds`` and the
``software`` versions), the Flower config's plan and the plan's refusal messages; its notes say on which
commit they were recorded. Re-record (only when a figure is
meant to change) with ``python -m tests.simulations.test_simulate_golden``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulations.config import build_config

FIXTURE = Path(__file__).parent / "data" / "simulate_golden.json"

#: name -> (overrides of default.toml, slow?). Small n, two rounds, seeded.
_BASE = ["rounds=2", "seed=3", "population.clients=16", "population.checkin=0.75"]
CASES: dict[str, tuple[list[str], bool]] = {
    "ideal-ddg": (["mode=ideal"], False),
    "crypto-ddg": (["mode=crypto"], False),
    "ideal-skellam": (["mode=ideal", "privacy.mechanism=skellam"], False),
    "crypto-skellam": (["mode=crypto", "privacy.mechanism=skellam"], True),
    "ideal-add-then-remove": (
        ["mode=ideal", "privacy.mechanism=skellam", "privacy.noise_enforcement=add-then-remove",
         "privacy.dropout_tolerance=0.25", "population.dropout=0.1", "secagg.security=semi-honest"],
        False,
    ),
    "crypto-add-then-remove": (
        ["mode=crypto", "privacy.mechanism=skellam", "privacy.noise_enforcement=add-then-remove",
         "privacy.dropout_tolerance=0.25", "population.dropout=0.1", "secagg.security=semi-honest"],
        True,
    ),
    "ideal-logreg-client": (["mode=ideal", "task.name=logreg", "task.local_steps=2"], False),
    "ideal-logreg-local-steps": (
        ["mode=ideal", "task.name=logreg", "privacy.unit=sample", "task.local_steps=3", "task.sample_rate=0.25"],
        False,
    ),
    "ideal-fixed": (["mode=ideal", "population.sampling=fixed", "population.dropout=0.0"], False),
    "crypto-neighbours": (
        ["mode=crypto", "secagg.neighbours=6", "population.dropout=0.1", "secagg.security=semi-honest"], True
    ),
    "ideal-capped": (["mode=ideal", "secagg.bits=62", "privacy.mechanism=skellam"], False),
    "ideal-active-neighbours": (["mode=ideal", "secagg.neighbours=6", "population.clients=40"], False),
}  # fmt: skip


#: Keys results.json gained after the fixture was recorded, each covered by its own tests
#: (tests/simulations/test_baseline_target.py): the config's ``baseline``, ``privacy.target_epsilon`` and
#: ``privacy.observer``; the privacy section's ``noise_multiplier``, ``target_epsilon``, ``calibrated`` and
#: ``calibration``. Dropped before the comparison, so every recorded figure is still compared exactly.
_ADDED = {"baseline", "target_epsilon", "calibrated", "calibration"}


def _strip(doc: Any, where: str = "") -> Any:
    """The document without wall-clock fields (``seconds`` anywhere, ``software``) and without the keys added
    after the recording (:data:`_ADDED`; ``observer`` and ``noise_multiplier`` only where they were added)."""
    if isinstance(doc, dict):
        added = set(_ADDED)
        if where == "config.privacy":
            added.add("observer")
        if where == "privacy":
            added.add("noise_multiplier")
        return {
            k: _strip(v, f"{where}.{k}" if where else k)
            for k, v in doc.items()
            if k not in ("seconds", "software") and k not in added
        }
    if isinstance(doc, list):
        return [_strip(v, where) for v in doc]
    return doc


def overrides_of(name: str) -> list[str]:
    """The case's overrides of default.toml (the mean task at dimension 24 unless the case names a task)."""
    own = CASES[name][0]
    return [*_BASE, *([] if any(o.startswith("task.name=") for o in own) else ["task.dim=24"]), *own]


def run_case(name: str, out: Path) -> Any:
    from simulations.runner import run_scenario

    cfg = build_config(None, overrides_of(name))
    doc = run_scenario(cfg, out / name)
    return json.loads(json.dumps(_strip(doc)))


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if slow else n for n, (_, slow) in CASES.items()]
)
def test_simulate_figures_unchanged(name: str, tmp_path: Path) -> None:
    golden = json.loads(FIXTURE.read_text())
    assert golden["cases"][name]["overrides"] == overrides_of(name)
    got = run_case(name, tmp_path)
    want = golden["cases"][name]["results"]
    for key in want:  # section by section: a failure names the section that moved
        assert got[key] == want[key], key
    assert got == want


#: FlowerDPConfig keyword sets whose derived plan (scale, sigma_int) and seeded encoding are recorded too.
FLOWER: dict[str, dict[str, Any]] = {
    "ddg": {"dim": 10, "clip": 1.0, "noise_multiplier": 1.0, "sample_size": 5, "population": 20, "threshold": 3},
    "skellam": {
        "dim": 33, "clip": 0.5, "noise_multiplier": 2.0, "sample_size": 8, "population": 50, "threshold": 4,
        "mechanism": "skellam", "bits": 24, "k_stddevs": 6.0,
    },
    "capped": {
        "dim": 4, "clip": 1.0, "noise_multiplier": 1.0, "sample_size": 2, "population": 4, "threshold": 2,
        "bits": 62, "k_stddevs": 3.0,
    },
}  # fmt: skip


def flower_case(name: str) -> dict[str, Any]:
    """A Flower config's derived scale and grid std, and the SHA-256 of one seeded client encoding."""
    import hashlib

    import numpy as np

    from simulations.flower.core import FlowerDPConfig, client_generator, encode_update

    cfg = FlowerDPConfig(**FLOWER[name], seed=7)
    update = np.linspace(-1.0, 1.0, cfg.dim)
    enc = encode_update(cfg, update, client_generator(cfg.seed, 1, 2))
    return {
        "scale": cfg.scale,
        "sigma_int": cfg.sigma_int,
        "encoding_sha256": hashlib.sha256(enc.tobytes()).hexdigest(),
    }


def test_flower_plan_unchanged() -> None:
    golden = json.loads(FIXTURE.read_text())["flower"]
    assert set(golden) == set(FLOWER)
    for name in FLOWER:
        assert flower_case(name) == golden[name], name


#: Refusals of the plan (printed messages): simulator overrides, or FlowerDPConfig keywords.
ERROR_CASES: dict[str, dict[str, Any]] = {
    "sim-bits": {"overrides": ["population.clients=16", "secagg.bits=4", "task.dim=24"]},
    "sim-noise": {
        "overrides": ["population.clients=16", "secagg.bits=62", "privacy.noise_multiplier=1e7", "task.dim=24"]
    },
    "flower-bits": {"flower": {"bits": 4, "noise_multiplier": 1.0}},
    "flower-noise": {"flower": {"bits": 62, "noise_multiplier": 1e7}},
}


def error_message(name: str) -> str:
    from secagg_dp.errors import ParameterError
    from simulations.flower.core import FlowerDPConfig
    from simulations.runner import plan

    case = ERROR_CASES[name]
    with pytest.raises(ParameterError) as info:
        if "overrides" in case:
            plan(build_config(None, case["overrides"]), 3)
        else:
            FlowerDPConfig(dim=24, clip=1.0, sample_size=5, population=20, threshold=3, **case["flower"])
    return str(info.value)


@pytest.mark.parametrize("name", list(ERROR_CASES))
def test_plan_refusals_unchanged(name: str) -> None:
    assert error_message(name) == json.loads(FIXTURE.read_text())["errors"][name]


def _record() -> None:  # pragma: no cover - run by hand
    import tempfile

    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
    cases = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in CASES:
            cases[name] = {"overrides": overrides_of(name), "results": run_case(name, Path(tmp))}
            print(name, file=sys.stderr)
    doc = {
        "note": f"recorded on commit {sha.stdout.strip()} before the refactor (secagg_dp.plan, NoiseSpec), with "
        "python -m tests.simulations.test_simulate_golden; results.json minus 'seconds' and 'software'",
        "cases": cases,
        "flower": {name: flower_case(name) for name in FLOWER},
        "errors": {name: error_message(name) for name in ERROR_CASES},
        "errors_note": "the plan's refusal messages, recorded with the cases of ERROR_CASES",
    }
    FIXTURE.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    _record()
