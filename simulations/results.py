"""The ``results.json`` document: schema, atomic writes, and a reader that checks the schema.

A run rewrites its document atomically (write to a temporary file in the same directory, fsync,
``os.replace``) after every round, so a run that is interrupted or killed at any moment leaves a complete,
readable JSON file whose ``status`` says how far it got ("running" if the process died without a chance to
say more, "interrupted" after Ctrl-C, "failed" after an error, "budget_exhausted" when the ledger refused
a round that would exceed ``privacy.epsilon_budget`` (that round is not released), "complete"). A failed run
also says why: ``failure`` = {``type``, ``message``, ``round`` (the round running when it failed, or null),
``rounds_completed``}; ``rounds`` keeps every round completed before it.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA",
    "STUDY_SCHEMA",
    "INFINITE_EPSILON",
    "METRICS_NOTE",
    "COALITION_KEYS",
    "FAILURE_KEYS",
    "write_atomic",
    "read_results",
    "check_results",
    "jsonable",
]

SCHEMA = "secagg-dp/simulate-results/1"
STUDY_SCHEMA = "secagg-dp/simulate-study/1"
_STATUSES = {"running", "complete", "interrupted", "failed", "budget_exhausted"}
_RUN_KEYS = {"schema", "status", "config", "seeds", "derived", "privacy", "rounds", "summary", "software"}
#: Keys of the ``failure`` object of a run with status "failed" (and of a failed study).
FAILURE_KEYS = {"type", "message", "round", "rounds_completed"}
_ROUND_KEYS = {"round", "checked_in", "included", "aborted", "epsilon", "order", "metrics", "seconds"}
#: Keys of a ``communication`` object (crypto mode; ``null`` in ideal mode and for an aborted round).
COMMUNICATION_KEYS = {"upload_bytes_mean", "upload_bytes_max", "download_bytes_mean", "download_bytes_max", "raw_bytes"}


#: Keys of ``privacy.coalition`` (the certificate against an active server with ``colluders`` corrupt clients).
COALITION_KEYS = {"observer", "epsilon", "delta", "method", "planned_epsilon", "colluders", "min_sum"}

#: ``metrics_note`` of a run document: the task metrics are not covered by the privacy certificates.
METRICS_NOTE = (
    "Task metrics (rounds[].metrics, summary.final_metrics) are computed by the simulator outside the protocol "
    "to evaluate utility, some from raw data (the mean task's mse compares the decoded mean with the survivors' "
    "true mean; logreg's accuracy and loss use held-out test data). They are not released by the protocol and "
    "are not covered by the privacy certificates in 'privacy'."
)

#: Reason attached to an infinite ε written as ``null`` (docs/cli-output.md, "Infinite values").
INFINITE_EPSILON = "no finite epsilon at this delta: the noise is too small (or delta too small) for any bound"


def jsonable(obj: Any, *, reasons: dict[str, str] | None = None) -> Any:
    """Strict JSON values: numpy scalars/arrays as Python numbers and lists, non-finite numbers as ``null``.

    JSON has no infinity. A non-finite number under key ``k`` of an object becomes ``null`` and the object
    gains ``k_reason`` (from ``reasons``, else a default sentence) unless it already has one; inside a
    list (e.g. an RDP curve's ``values``) ``null`` stands for +inf. NaN (an undefined metric, e.g. of a
    round without survivors) is a bare ``null``.
    """
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            v = v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else v
            if isinstance(v, float) and math.isinf(v):
                out[str(k)] = _finite_or_none(v)
                if f"{k}_reason" not in obj:
                    out[f"{k}_reason"] = (reasons or {}).get(str(k), _default_reason(str(k), v))
            else:
                out[str(k)] = jsonable(v, reasons=reasons)
        return out
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        return [jsonable(v, reasons=reasons) for v in items]
    if hasattr(obj, "tolist"):
        return jsonable(obj.tolist(), reasons=reasons)
    if isinstance(obj, float):
        return _finite_or_none(obj)
    return obj


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _default_reason(key: str, value: float) -> str:
    if key.startswith("epsilon") and value > 0:
        return INFINITE_EPSILON
    return "+inf" if value > 0 else "-inf"


def write_atomic(path: str | Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` as JSON to ``path`` atomically (readers see the old or the new file, never a torn one)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(jsonable(doc), indent=2, allow_nan=False)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_results(doc: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming the first schema violation of a run or study document."""
    if doc.get("schema") == STUDY_SCHEMA:
        for key in ("status", "study", "runs"):
            if key not in doc:
                raise ValueError(f"study results lack key {key!r}")
        for run in doc["runs"]:
            for key in ("label", "values", "out", "results"):
                if key not in run:
                    raise ValueError(f"study run lacks key {key!r}")
            check_results(run["results"])
        return
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"unknown schema {doc.get('schema')!r}")
    missing = _RUN_KEYS - set(doc)
    if missing:
        raise ValueError(f"results lack keys {sorted(missing)}")
    if doc["status"] not in _STATUSES:
        raise ValueError(f"bad status {doc['status']!r}")
    failure = doc.get("failure")
    if failure is not None and FAILURE_KEYS - set(failure):
        raise ValueError(f"failure lacks keys {sorted(FAILURE_KEYS - set(failure))}")
    for key in ("method", "neighbouring", "delta", "accountant"):
        if key not in doc["privacy"]:
            raise ValueError(f"privacy lacks key {key!r}")
    coalition = doc["privacy"].get("coalition")  # absent from a run with an accountant of the caller's choice
    if coalition is not None and COALITION_KEYS - set(coalition):
        raise ValueError(f"privacy.coalition lacks keys {sorted(COALITION_KEYS - set(coalition))}")
    if coalition is not None and coalition["observer"] != "coalition":
        raise ValueError(f"privacy.coalition has observer {coalition['observer']!r}, not 'coalition'")
    for i, rnd in enumerate(doc["rounds"], start=1):
        if _ROUND_KEYS - set(rnd):
            raise ValueError(f"round {i} lacks keys {sorted(_ROUND_KEYS - set(rnd))}")
        if rnd["round"] != i:
            raise ValueError(f"round {i} is numbered {rnd['round']}")
    for where, obj in [*((f"round {r['round']}", r) for r in doc["rounds"]), ("summary", doc["summary"])]:
        comm = obj.get("communication")
        if comm is not None and COMMUNICATION_KEYS - set(comm):
            raise ValueError(f"{where}: communication lacks keys {sorted(COMMUNICATION_KEYS - set(comm))}")


def read_results(path: str | Path) -> dict[str, Any]:
    """Load and schema-check a results.json (a run's or a study's)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    check_results(doc)
    return doc
