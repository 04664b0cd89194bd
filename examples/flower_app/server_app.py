"""The ServerApp: FedAvg of the decoded, noised mean update, each round certified and spent in a ledger."""

from __future__ import annotations

import json
import os
import time

import numpy as np
from app_config import config_from_env
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from task import DIM, loss

from simulations.flower import SecAggDPWorkflow

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cfg, rounds, out = config_from_env()
    workflow = SecAggDPWorkflow(cfg, ledger_path=None if out is None else os.path.join(out, "ledger.sqlite"))
    w = np.zeros(DIM)
    log = []
    for r in range(rounds):
        t0 = time.perf_counter()
        res = workflow.run_round(grid, ArrayRecord([w]), r)
        seconds = time.perf_counter() - t0
        log.append(
            {
                "round": r,
                "model": w.tolist(),
                "aggregate": [int(v) for v in res.aggregate],
                "included": res.included,
                "epsilon": res.epsilon,
                "server_epsilon": res.server_epsilon,
                "seconds": seconds,
            }
        )
        w = w + res.mean
        print(
            f"round {r}: {res.included}/{cfg.sample_size} noised inputs, loss {loss(w, cfg.population):.4f}, "
            f"epsilon {res.epsilon:.3f} (analyst), {res.server_epsilon:.3f} (server) at delta {cfg.delta:g}"
        )
    workflow.close()
    if out is not None:
        with open(os.path.join(out, "rounds.json"), "w") as f:
            json.dump(log, f)
