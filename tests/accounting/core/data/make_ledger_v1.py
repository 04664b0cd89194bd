"""Writes ledger_v1.sqlite and ledger_v1.json with the ledger code of format 1 (before events were persisted).

Run from a checkout of that version (commit 9c7100c, "Ignore mypy and ruff caches", or any earlier commit
with meta 'format' = 'secagg-dp-ledger/1'), e.g. ``git worktree add /tmp/v1 9c7100c`` then
``cd /tmp/v1 && PYTHONPATH=$PWD python <this file> <output folder>``. The JSON records what that version
itself reported for the file (entries, composed RDP, epsilon at delta = 1e-5), so the test of the current
reader compares with the old reader's figures, not with its own.
"""

import json
import sys
from pathlib import Path

from secagg_dp.accounting import Composed, Gaussian, PoissonSampled, PrivacyLedger, SelfComposed, Skellam

out = Path(sys.argv[1])
path = out / "ledger_v1.sqlite"
g = Gaussian(4.0, 1.0, "add-remove")
with PrivacyLedger("add-remove", path=path, epsilon_budget=3.0, delta=1e-5) as led:
    led.spend(g, 2)
    led.spend(PoissonSampled(0.05, g), 100)
    led.spend(Composed((Skellam(400.0, 2.0, 4.0, "add-remove"), SelfComposed(g, 2))))
    eps, order = led.epsilon()
    record = {
        "neighbouring": led.neighbouring,
        "entries": led.entries,
        "rdp": [float(x) for x in led.rdp],
        "epsilon": eps,
        "order": order,
        "delta": 1e-5,
        "epsilon_budget": 3.0,
    }
(out / "ledger_v1.json").write_text(json.dumps(record, indent=1) + "\n")
