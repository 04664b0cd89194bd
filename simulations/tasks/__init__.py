"""Learning tasks run by the simulator: the :class:`Task` protocol, distributed mean estimation and federated
logistic regression (bundled), and any user task named by import path.

A task supplies (1) the client side: the real vector(s) a participant encodes in a round, and
(2) the server side: what the decoded modular sum does to the model and the utility metric it reports.
Client data are a deterministic function of the root seed and the client id, so any worker (in-process or
Dask) regenerates exactly the same data without shipping it. See :mod:`simulations.tasks.protocol`.
"""

from __future__ import annotations

from typing import Any

from simulations.tasks.logreg import LogRegTask, load_digits_partition
from simulations.tasks.mean import MeanTask, client_vector
from simulations.tasks.protocol import SampleLevelTask, Task, check_task, load_task

__all__ = [
    "Task",
    "SampleLevelTask",
    "MeanTask",
    "LogRegTask",
    "client_vector",
    "load_digits_partition",
    "make_task",
    "load_task",
    "check_task",
]


def make_task(cfg: Any) -> Any:
    """The task object for a validated :class:`~simulations.config.SimConfig`: a bundled task (``mean``,
    ``logreg``) or the one named ``"package.module:Class"`` built with the ``[task.options]`` keywords."""
    if cfg.task.name == "mean":
        return MeanTask(dim=cfg.task.dim, clip=cfg.privacy.clip)
    if cfg.task.name == "logreg":
        return LogRegTask(
            n_clients=cfg.population.clients,
            local_steps=cfg.task.local_steps,
            sample_rate=cfg.task.sample_rate,
            learning_rate=cfg.task.learning_rate,
            unit=cfg.privacy.unit,
        )
    return load_task(cfg.task.name, dict(cfg.task.options))
