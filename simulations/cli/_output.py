"""JSON output conventions shared by every ``secagg-dp`` command (documented in docs/cli-output.md).

* Numbers are JSON numbers. JSON has no infinity: a non-finite number under key ``k`` of an object is
  written ``null`` and the object gains ``k_reason`` (a sentence saying why); inside a list (an RDP curve's
  ``values``) ``null`` stands for +inf. NaN is never printed: it is an internal error.
* Every RDP curve is ``{"orders": [...], "values": [...]}`` (:func:`rdp_curve`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

__all__ = ["rdp_curve", "jsonable", "dumps", "INFINITE_EPSILON"]

#: Reason attached to an infinite ε.
INFINITE_EPSILON = "no finite epsilon at this delta: the noise is too small (or delta too small) for any bound"


def rdp_curve(orders: Iterable[float], values: Iterable[float]) -> dict[str, list[Any]]:
    """``{"orders": [...], "values": [...]}``: integer orders as ints; a +inf value becomes ``None``."""
    o = [int(a) if float(a).is_integer() else float(a) for a in orders]
    v = [_finite_or_none(float(x)) for x in values]
    return {"orders": o, "values": v}


def _finite_or_none(x: float) -> float | None:
    if math.isnan(x):
        raise ValueError("NaN reached the JSON output; this is a bug, please report it")
    return x if math.isfinite(x) else None


def jsonable(obj: Any, *, reasons: dict[str, str] | None = None) -> Any:
    """A copy of ``obj`` with numpy scalars as Python numbers and non-finite numbers as ``null`` (+ reason)."""
    import numpy as np  # lazily: registration modules keep `secagg-dp --help` fast

    reasons = reasons or {}
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
                out[k] = _finite_or_none(float(v))
                key = f"{k}_reason"
                if key not in obj:
                    out[key] = reasons.get(k, INFINITE_EPSILON if k.startswith("epsilon") else "infinite")
            else:
                out[k] = jsonable(v, reasons=reasons)
        return out
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, reasons=reasons) for v in obj]
    if isinstance(obj, np.ndarray):
        return [jsonable(v, reasons=reasons) for v in obj.tolist()]
    if isinstance(obj, (bool, np.bool_)):
        return bool(obj)
    if isinstance(obj, (int, np.integer)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return _finite_or_none(float(obj))
    return obj


def dumps(obj: Any, *, reasons: dict[str, str] | None = None, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (``allow_nan=False``) after :func:`jsonable`."""
    return json.dumps(jsonable(obj, reasons=reasons), allow_nan=False, indent=indent)
