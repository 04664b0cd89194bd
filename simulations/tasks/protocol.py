"""The task protocol: what the simulator asks of a learning task, and the checks it runs on one before any work.

A task is any object with the four members of :class:`Task` (structural typing: no base class to inherit).
The simulator owns everything privacy depends on: it selects the participants, **clips** every row a task
returns to ``privacy.clip`` (it never trusts a task's norm), encodes onto Z_q, adds the discrete noise, runs
secure aggregation and accounts the round; the task only turns a model into per-client update vectors and
a decoded sum back into a model.

Units of privacy (``privacy.unit``):

* ``"client"`` (DP-FedAvg with distributed noise): :meth:`Task.client_vectors` returns each participant's
  whole update (any number of local steps, run by the task itself); the simulator clips that row to C and
  adds one noise share. The certificate protects a client's whole data set and does not depend on what the
  task does locally, since only the clipped row leaves the client.
* ``"sample"`` (DP-SGD inside each client): the simulator runs the ``task.local_steps`` local steps itself:
  in each it Poisson-samples the client's examples at rate ``task.sample_rate``, asks
  :meth:`SampleLevelTask.sample_vectors` for one row per sampled example, clips each row to C, encodes it,
  adds one noise share per step and hands the decoded noisy step sum to :meth:`SampleLevelTask.local_update`.
  The accountant is given exactly these S, q and the per-example sensitivity, because the simulator did them.

Optional members (a task without them runs as before): ``setup(context)`` receives a :class:`TaskContext`
(the population size n, the unit and the root seed) before ``init_model``, e.g. to split a data set over the
n clients; ``describe()`` returns a dict of JSON values, the task's own settings, recorded in results.json as
``config.task.reported`` (without it, the task's public number/string/boolean attributes are recorded).

Contract checks: every call into the task is made through :func:`call_task`, so anything a task raises, and
any return value that breaks the contract (rows of the wrong shape or not real, ``server_update`` not
returning ``(model, metrics)``), becomes one :class:`~secagg_dp.errors.TaskError` naming the task, the method
and what was expected (the round too, when it happens inside one).

Determinism: client data and any local randomness of :meth:`Task.client_vectors` must be a function of
``(root_seed, round, client id)`` only, so a block of clients gives the same rows whichever worker runs it and
in whatever blocks the participants are cut (numpy ``SeedSequence(root_seed, spawn_key=(..., round, cid))``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from secagg_dp._validate import all_finite
from secagg_dp.errors import ConfigError, TaskError

__all__ = [
    "Task",
    "SampleLevelTask",
    "TaskContext",
    "load_task",
    "task_label",
    "check_task",
    "check_rows",
    "call_task",
    "check_server_update",
    "task_description",
    "MAX_VECTOR_DIM",
]

MAX_VECTOR_DIM = 1 << 24  # the codec pads to a power of two; larger vectors do not fit one round's arrays


@runtime_checkable
class Task(Protocol):
    """A federated learning task the simulator can run (client-level unit of privacy).

    ``vector_dim`` is the length of every client's update vector. All methods must be deterministic
    functions of their arguments (see the module docstring), and the object must pickle if it is to run
    on Dask worker processes (a class importable on the workers)."""

    vector_dim: int

    def init_model(self, root_seed: int) -> Any:
        """The round-1 model (any picklable object; it is shipped to the clients every round)."""
        ...

    def client_vectors(self, model: Any, client_ids: np.ndarray, round: int, root_seed: int) -> np.ndarray:
        """One float row of length ``vector_dim`` per id in ``client_ids``: that client's update before clipping.

        Called once per block of participants (at most ``simulations.clients.BLOCK`` ids, int64, sorted):
        never assume it sees every participant of the round at once."""
        ...

    def server_update(
        self, model: Any, decoded_sum: np.ndarray, participants: int, root_seed: int
    ) -> tuple[Any, dict[str, float]]:
        """The next model from the decoded noisy sum of the ``participants`` clipped updates, and the metrics
        (name -> float) reported for the round."""
        ...


@runtime_checkable
class SampleLevelTask(Task, Protocol):
    """A task that can also run at the sample level (``privacy.unit = "sample"``, DP-SGD in each client).

    Every client holds the same number of examples (``shard_size``), so the expected batch q m is public."""

    def shard_size(self, root_seed: int) -> int:
        """Number m of training examples each client holds."""
        ...

    def sample_vectors(
        self, model: Any, client_id: int, examples: np.ndarray, round: int, root_seed: int
    ) -> np.ndarray:
        """One float row of length ``vector_dim`` per index in ``examples`` (the client's sampled examples):
        that example's gradient before clipping."""
        ...

    def local_update(self, model: Any, step_sum: np.ndarray, expected_batch: float) -> Any:
        """The client's model after one local step, from the decoded noisy sum of the step's clipped rows
        (``expected_batch`` = q m)."""
        ...


@dataclass(frozen=True)
class TaskContext:
    """What the simulator tells a task before any round, through its optional ``setup(context)`` method.

    ``clients`` is the population size n (every client id is in [0, n)), ``unit`` the unit of privacy
    (``"client"`` or ``"sample"``), ``root_seed`` the run's root seed. ``setup`` may be called more than once
    (the plan and the run each check the task) and must give the same task state each time."""

    clients: int
    unit: str
    root_seed: int


def task_label(task: Any) -> str:
    """How error messages name a task: its ``name`` attribute, or its class."""
    name = getattr(task, "name", None)
    return name if isinstance(name, str) and name else type(task).__name__


def load_task(path: str, options: dict[str, Any]) -> Any:
    """Instantiate the task named ``"package.module:Class"`` (or a factory function) with ``options``.

    The module is looked up on ``sys.path`` and then in the current folder (as ``python -m`` would; the
    ``secagg-dp`` script's own folder is not the user's). Raises one :class:`~secagg_dp.errors.ConfigError`
    naming ``task.name`` when the module or the attribute is missing or the constructor refuses the options
    (a TaskError when the constructor raises anything else)."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"Config key 'task.name' must be 'mean', 'logreg' or 'package.module:Class', not {path!r}.")
    try:
        module = _import(module_name)
    except ImportError as exc:
        raise ConfigError(f"Config key 'task.name' = {path!r}: cannot import module {module_name!r} ({exc}).") from exc
    factory = module
    for part in attr.split("."):
        if not hasattr(factory, part):
            raise ConfigError(f"Config key 'task.name' = {path!r}: module {module_name!r} has no attribute {attr!r}.")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ConfigError(f"Config key 'task.name' = {path!r}: {attr!r} is not a class or function.")
    try:
        return factory(**options)
    except TypeError as exc:
        raise ConfigError(f"Config key 'task.options' does not fit task {path!r}: {exc}.") from exc
    except TaskError:
        raise
    except Exception as exc:  # the task's own constructor failed: one line, not a traceback
        at = _where(exc)
        raise TaskError(
            f"Task {path!r}: its constructor raised {type(exc).__name__}: {exc}" + (f" ({at})." if at else ".")
        ) from exc


def _where(exc: BaseException) -> str:
    """``at file.py:line`` of the innermost frame that raised ``exc`` (empty if raised where it was called)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return f"at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if len(frames) > 1 else ""


def _import(module_name: str) -> Any:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        top = module_name.split(".")[0]
        if exc.name != top or cwd in sys.path or "" in sys.path:
            raise
        sys.path.append(cwd)  # after every installed package: the current folder never shadows one
        return importlib.import_module(module_name)


def check_rows(
    task: Any, rows: Any, n: int, dim: int, what: str = "client_vectors", *, finite: bool = True
) -> np.ndarray:
    """``rows`` as a float64 (n, dim) array, or a one-line TaskError naming the task and the method.

    ``finite`` False: the caller checks finiteness in a pass it makes anyway (and calls again with True to
    get this message)."""
    label = task_label(task)
    try:
        raw = np.asarray(rows)
        if raw.dtype.kind == "c":  # float64 conversion would drop the imaginary part with only a warning
            raise TaskError(
                f"Task {label!r}: {what} must return real numbers, not complex ones (dtype {raw.dtype}); "
                "take the real part (or the magnitude) in the task if that is what the update is."
            )
        arr = np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, TaskError):
            raise
        raise TaskError(f"Task {label!r}: {what} must return real numbers, not {type(rows).__name__}.") from exc
    if arr.shape != (n, dim):
        raise TaskError(
            f"Task {label!r}: {what} must return an array of shape ({n}, {dim}) (one row of vector_dim reals "
            f"per id), not {arr.shape}."
        )
    if finite and not all_finite(arr):
        bad = int(np.count_nonzero(~np.isfinite(arr)))
        raise TaskError(f"Task {label!r}: {what} returned {bad} non-finite value(s) (NaN or inf).")
    return arr


def check_task(task: Any, *, root_seed: int, clients: int, unit: str) -> Any:
    """Check ``task`` before any round and return its initial model (raises a one-line TaskError).

    Checks: it satisfies :class:`Task` (and :class:`SampleLevelTask` for ``unit = "sample"``); ``vector_dim``
    is an integer in [1, 2^24]; ``init_model`` runs; ``client_vectors`` on clients 0, 1 and n - 1 of round 1
    returns finite rows of the right shape (and ``sample_vectors`` on one example for the sample level).
    A task with a ``setup`` method is first given the :class:`TaskContext` (population size, unit, seed)."""
    label = task_label(task)
    if not isinstance(task, Task):
        missing = [m for m in ("vector_dim", "init_model", "client_vectors", "server_update") if not hasattr(task, m)]
        raise TaskError(f"Task {label!r} is not a simulations.Task: it lacks {', '.join(missing)}.")
    dim = task.vector_dim
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or not 1 <= int(dim) <= MAX_VECTOR_DIM:
        raise TaskError(f"Task {label!r}: vector_dim must be an integer in [1, {MAX_VECTOR_DIM}], not {dim!r}.")
    if unit == "sample" and not isinstance(task, SampleLevelTask):
        raise TaskError(
            f"Task {label!r} cannot run with privacy.unit = 'sample': it lacks shard_size, sample_vectors "
            "and local_update (see simulations.SampleLevelTask)."
        )
    if callable(getattr(task, "setup", None)):
        call_task(task, "setup", TaskContext(clients=int(clients), unit=unit, root_seed=int(root_seed)))
        dim = task.vector_dim  # setup may size the task (e.g. from the population)
        if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or not 1 <= int(dim) <= MAX_VECTOR_DIM:
            raise TaskError(
                f"Task {label!r}: vector_dim must be an integer in [1, {MAX_VECTOR_DIM}] after setup, not {dim!r}."
            )
    model = call_task(task, "init_model", root_seed)
    probe = np.unique(np.array([0, 1, clients - 1], dtype=np.int64).clip(0, clients - 1))
    check_rows(task, call_task(task, "client_vectors", model, probe, 1, root_seed), len(probe), int(dim))
    if unit == "sample":
        m = call_task(task, "shard_size", root_seed)
        if isinstance(m, bool) or not isinstance(m, int | np.integer) or m < 1:
            raise TaskError(f"Task {label!r}: shard_size must be a positive integer, not {m!r}.")
        rows = call_task(task, "sample_vectors", model, 0, np.zeros(1, dtype=np.int64), 1, root_seed)
        check_rows(task, rows, 1, int(dim), "sample_vectors")
    return model


def _kind(obj: Any) -> str:
    """A short description of a returned value for error messages."""
    if isinstance(obj, tuple):
        return f"a tuple of {len(obj)} item{'' if len(obj) == 1 else 's'}"
    if isinstance(obj, np.ndarray):
        return f"an array of shape {obj.shape}"
    return "None" if obj is None else f"a {type(obj).__name__}"


def call_task(task: Any, method: str, *args: Any, round: int | None = None) -> Any:
    """``task.<method>(*args)``; anything it raises becomes one :class:`~secagg_dp.errors.TaskError` naming the
    task, the method, the round (if given), the exception and the line of the task's code that raised it
    (the original exception is chained as ``__cause__``)."""
    try:
        return getattr(task, method)(*args)
    except TaskError:
        raise
    except Exception as exc:
        where = ", ".join(p for p in ("" if round is None else f"round {round}", _where(exc)) if p)
        raise TaskError(
            f"Task {task_label(task)!r}: {method} raised {type(exc).__name__}: {exc}"
            + (f" ({where})." if where else ".")
        ) from exc


def check_server_update(task: Any, out: Any, round: int | None = None) -> tuple[Any, dict[str, float]]:
    """The ``(model, metrics)`` pair ``server_update`` must return, with metrics as {str: float}, or one
    TaskError naming the task and what it returned instead."""
    if not (isinstance(out, tuple) and len(out) == 2):
        when = "" if round is None else f" (round {round})"
        raise TaskError(
            f"Task {task_label(task)!r}: server_update must return a tuple (model, metrics) with metrics a dict "
            f"of name -> float (possibly empty), not {_kind(out)}{when}."
        )
    return out[0], finite_metrics(task, out[1])


def finite_metrics(task: Any, metrics: Any, what: str = "server_update") -> dict[str, float]:
    """``metrics`` as {str: float}, or a one-line TaskError naming the task."""
    if not isinstance(metrics, dict):
        raise TaskError(
            f"Task {task_label(task)!r}: {what} must return metrics as a dict of name -> float, not {_kind(metrics)}."
        )
    out: dict[str, float] = {}
    for k, v in metrics.items():
        try:
            out[str(k)] = float(v)
        except (TypeError, ValueError) as exc:
            raise TaskError(f"Task {task_label(task)!r}: metric {k!r} is not a number ({v!r}).") from exc
    return out


_SCALARS = (bool, int, float, str, np.bool_, np.integer, np.floating)


def task_description(task: Any, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a task reports about its own settings, for results.json (``config.task.reported``).

    The task's optional ``describe()`` method (a dict of JSON values); without one, its public attributes
    that are numbers, strings or booleans (``vector_dim`` and ``name`` are recorded elsewhere), updated with
    the constructor keywords ``options`` it was built with."""
    label = task_label(task)
    if callable(getattr(task, "describe", None)):
        out = call_task(task, "describe")
        if not isinstance(out, dict):
            raise TaskError(f"Task {label!r}: describe must return a dict of JSON values, not {_kind(out)}.")
        from simulations.results import jsonable

        try:
            json.dumps(jsonable(out), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TaskError(f"Task {label!r}: describe must return a dict of JSON values ({exc}).") from exc
        return {str(k): v for k, v in out.items()}
    attrs = {
        k: v.item() if isinstance(v, np.generic) else v
        for k, v in getattr(task, "__dict__", {}).items()
        if not k.startswith("_") and k not in ("vector_dim", "name") and isinstance(v, _SCALARS)
    }
    return {**attrs, **(options or {})}
