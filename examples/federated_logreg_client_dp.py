"""Federated logistic regression with client-level DP, through the simulator's Python API.

200 clients share scikit-learn's bundled digits data (no download; 7 training images each, accuracy on a
held-out fifth of the data); each round every client checks in with
probability p = 0.25, runs two local gradient steps, clips its whole update to C = 1, encodes it onto Z_q
and adds its share of Skellam noise once (DP-FedAvg with distributed noise, ``privacy.unit = "client"``,
the default for ``task = "logreg"``). The noise multiplier z = 3 is the std of the expected participants'
summed noise relative to C. The certificate is client-level, replace-one (a client's whole data set
replaced): the distributed check-in mixture over K ~ Bin(n, p) with the K-client Skellam sum (Agarwal,
Kairouz & Liu 2021), subsampled at rate K/n (Wang, Balle & Kasiviswanathan 2019). It is printed for the
analyst (sees the released model and K) and for the secure-aggregation server (also sees who took part),
plus the server's ex-post figure for a client seen in every round (docs/accounting/observers.md).
``mode = "ideal"`` computes the modular sum directly; the tests check it equals the full protocol's sum.
Run: python examples/federated_logreg_client_dp.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from simulations.config import build_config
from simulations.study import format_table, run, summary_rows

SCENARIO = {
    "name": "logreg-client-dp",
    "mode": "ideal",
    "rounds": 15,
    "seed": 1,
    "population": {"clients": 200, "checkin": 0.25, "dropout": 0.0},
    "secagg": {"bits": 24},
    "privacy": {"mechanism": "skellam", "noise_multiplier": 3.0, "delta": 1e-5},  # unit "client" by default
    "task": {"name": "logreg", "local_steps": 2, "learning_rate": 1.0},
}
CHANCE = 0.1  # ten digit classes


def main(out_dir: Path) -> None:
    cfg = build_config(SCENARIO)
    doc = run(cfg, out_dir, plots=False)
    print(format_table(summary_rows(doc)))
    privacy, summary = doc["privacy"], doc["summary"]
    server = privacy["server"]
    accuracy = summary["final_metrics"]["accuracy"]
    print(
        f"\nn = {cfg.population.clients}, p = {cfg.population.checkin}, z = {cfg.privacy.noise_multiplier}, "
        f"{cfg.task.local_steps} local steps, T = {summary['rounds_completed']}, "
        f"about {summary['mean_included']:.0f} clients per round"
    )
    print(f"test accuracy after {summary['rounds_completed']} rounds: {accuracy:.3f} (chance {CHANCE})")
    print(f"unit of privacy: {privacy['unit']} ({privacy['neighbouring']}), delta = {privacy['delta']:g}")
    print(f"  observer {privacy['observer']:<8} eps = {privacy['epsilon']:.3f}   sees the released model and K")
    print(f"  observer {server['observer']:<8} eps = {server['epsilon']:.3f}   sees {server['sees']}")
    print(f"  server, ex-post  eps = {server['ex_post']['epsilon']:.3f}   for {server['ex_post']['for']}")
    print(f"results: {Path(out_dir) / 'results.json'}")
    if doc["status"] != "complete":
        raise SystemExit(f"the run did not complete: {doc['status']}")
    if (privacy["unit"], privacy["neighbouring"]) != ("client", "replace-one"):
        raise SystemExit("expected a client-level, replace-one certificate")
    if server["epsilon"] < privacy["epsilon"]:
        raise SystemExit("the server's certificate is below the analyst's: the server sees strictly more")
    if accuracy <= 2 * CHANCE:
        raise SystemExit(f"accuracy {accuracy:.3f} is barely above chance: the model did not learn")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(Path(tmp))
