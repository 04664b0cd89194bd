"""Runnable scenarios, the secagg-dp CLI, configs and plots, built on protocols and secagg_dp.

:class:`Task` (and :class:`SampleLevelTask`) is the protocol a learning task implements to run through the
simulator (``run_scenario(cfg, out, task=...)`` or ``task.name = "package.module:Class"`` in a config).
"""

from simulations.tasks.protocol import SampleLevelTask, Task

__all__ = ["Task", "SampleLevelTask"]
