"""The ServerApp: FedAvg of the decoded, noised mean update, each round certified and spent in a ledger."""

from __future__ import annotations

import json
import os

import numpy as np
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from task import DIM, loss

from simulations.flower import FlowerDPConfig, SecAggDPWorkflow

app = ServerApp()


def config_from_env() -> tuple[FlowerDPConfig, int, str | None]:
    """The run's parameters (run.py sets them in the environment: the Simulation Engine starts the app)."""
    e = os.environ
    cfg = FlowerDPConfig(
        dim=DIM,
        clip=float(e.get("FLOWER_APP_CLIP", "1.0")),
        noise_multiplier=float(e.get("FLOWER_APP_Z", "1.0")),
        sample_size=int(e["FLOWER_APP_M"]),
        population=int(e["FLOWER_APP_N"]),
        threshold=int(e["FLOWER_APP_T"]),
        bits=int(e.get("FLOWER_APP_BITS", "20")),
        mechanism=e.get("FLOWER_APP_MECHANISM", "ddg"),
        security=e.get("FLOWER_APP_SECURITY", "semi-honest"),
        seed=int(e["FLOWER_APP_SEED"]) if e.get("FLOWER_APP_SEED") else None,
    )
    return cfg, int(e.get("FLOWER_APP_ROUNDS", "3")), e.get("FLOWER_APP_OUT") or None


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg, rounds, out = config_from_env()
    workflow = SecAggDPWorkflow(cfg, ledger_path=None if out is None else os.path.join(out, "ledger.sqlite"))
    w = np.zeros(DIM)
    log = []
    for r in range(rounds):
        res = workflow.run_round(grid, ArrayRecord([w]), r)
        log.append({"round": r, "model": w.tolist(), "aggregate": [int(v) for v in res.aggregate]})
        w = w + res.mean
        print(
            f"round {r}: {res.included}/{cfg.sample_size} noised inputs, loss {loss(w, cfg.population):.4f}, "
            f"epsilon {res.epsilon:.3f} (analyst), {res.server_epsilon:.3f} (server) at delta {cfg.delta:g}"
        )
    workflow.close()
    if out is not None:
        with open(os.path.join(out, "rounds.json"), "w") as f:
            json.dump(log, f)
