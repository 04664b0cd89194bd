"""The run's parameters, shared by the ServerApp and the ClientApp (run.py sets them in the environment: the
Simulation Engine starts the apps itself)."""

from __future__ import annotations

import os

from task import DIM

from simulations.flower import FlowerDPConfig


def config_from_env() -> tuple[FlowerDPConfig, int, str | None]:
    """The run's parameters (run.py sets them in the environment: the Simulation Engine starts the app).

    The ClientApp pins its Mod to this config (client_app.py): in a deployment each node reads its own copy
    (its node config), so the degree, minimum roster, threshold and mode it enforces are never the server's."""
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
        neighbours=int(e["FLOWER_APP_NEIGHBOURS"]) if e.get("FLOWER_APP_NEIGHBOURS") else None,
        min_roster=int(e["FLOWER_APP_MIN_ROSTER"]) if e.get("FLOWER_APP_MIN_ROSTER") else None,
    )
    return cfg, int(e.get("FLOWER_APP_ROUNDS", "3")), e.get("FLOWER_APP_OUT") or None
