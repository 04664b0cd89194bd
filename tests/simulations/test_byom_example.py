"""The bring-your-own-model example (docs/bring-your-own-model.md) runs and prints what the guide says."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "bring_your_own_model.py"


@pytest.mark.slow  # the full protocol for 8 rounds of ~30 clients: a few seconds
def test_example_trains_a_user_task_through_the_protocol(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bring_your_own_model", EXAMPLE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    doc = mod.main(tmp_path)
    out = capsys.readouterr().out
    acc = [float(a) for a in re.search(r"after each round: ([\d. ]+)", out).group(1).split()]
    before = float(re.search(r"accuracy before training ([\d.]+)", out).group(1))
    assert len(acc) == 8 and before < 0.6 and acc[-1] > 0.8, out  # learned through clip + noise + SecAgg
    eps = float(re.search(r"certified epsilon = ([\d.]+)", out).group(1))
    disk = json.loads((tmp_path / "results.json").read_text())
    assert eps == pytest.approx(disk["privacy"]["epsilon"], abs=1e-4) and 0 < eps < 10
    assert disk["config"]["mode"] == "crypto" and disk["config"]["task"]["name"].endswith(":LogisticTask")
    assert all(r["communication"] for r in disk["rounds"])  # every round went through the protocol
    assert doc["privacy"]["unit"] == "client"
