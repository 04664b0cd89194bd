"""Runnable scenarios, the secagg-dp CLI, configs and plots, built on protocols and secagg_dp.

:class:`Task` (and :class:`SampleLevelTask`) is the protocol a learning task implements to run through the
simulator (``run_scenario(cfg, out, task=...)`` or ``task.name = "package.module:Class"`` in a config).
Both are imported on first use, so ``import simulations`` (and the CLI's parser) stays free of numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulations.tasks.protocol import SampleLevelTask, Task

__all__ = ["Task", "SampleLevelTask"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from simulations.tasks import protocol

        return getattr(protocol, name)
    raise AttributeError(f"module 'simulations' has no attribute {name!r}")
