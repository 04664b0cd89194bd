"""JSON output conventions shared by every ``secagg-dp`` command (documented in docs/cli-output.md).

* Numbers are JSON numbers; a non-finite one is ``null`` plus ``<key>_reason``
  (:func:`simulations.results.jsonable`); inside an RDP curve's ``values`` ``null`` means +inf.
* Every RDP curve is ``{"orders": [...], "values": [...]}`` (:func:`rdp_curve`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from simulations.results import INFINITE_EPSILON, jsonable

__all__ = ["rdp_curve", "dumps", "INFINITE_EPSILON"]


def rdp_curve(orders: Iterable[float], values: Iterable[float]) -> dict[str, list[Any]]:
    """``{"orders": [...], "values": [...]}``: integer orders as ints; a +inf value becomes ``None``."""
    o = [int(a) if float(a).is_integer() else float(a) for a in orders]
    return {"orders": o, "values": jsonable([float(x) for x in values])}


def dumps(obj: Any, *, reasons: dict[str, str] | None = None, indent: int | None = None) -> str:
    """Strict JSON text of ``obj`` (``allow_nan=False``) after :func:`simulations.results.jsonable`."""
    return json.dumps(jsonable(obj, reasons=reasons), allow_nan=False, indent=indent)
