"""Learning tasks run by the simulator: distributed mean estimation and federated logistic regression.

A task supplies (1) the client side: the real vector(s) a participant encodes in a round, and
(2) the server side: what the decoded modular sum does to the model and the utility metric it reports.
Client data are a deterministic function of the root seed and the client id, so any worker (in-process or
Dask) regenerates exactly the same data without shipping it.
"""

from simulations.tasks.logreg import LogRegTask, load_digits_partition
from simulations.tasks.mean import MeanTask, client_vector

__all__ = ["MeanTask", "LogRegTask", "client_vector", "load_digits_partition", "make_task"]


def make_task(cfg):  # noqa: ANN001, ANN201 - SimConfig -> task
    """The task object for a validated :class:`~simulations.config.SimConfig`."""
    if cfg.task.name == "mean":
        return MeanTask(dim=cfg.task.dim, clip=cfg.privacy.clip)
    return LogRegTask(
        n_clients=cfg.population.clients,
        local_steps=cfg.task.local_steps,
        sample_rate=cfg.task.sample_rate,
        learning_rate=cfg.task.learning_rate,
        unit=cfg.privacy.unit,
    )
