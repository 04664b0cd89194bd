"""Exact JSON form of privacy events, for the ledger: every spend is stored as the event itself, not a curve.

An event (a frozen dataclass deriving from :class:`~secagg_dp.accounting.core.events.PrivacyEvent`) becomes
``{"dataclass": {"type": "<module>.<Class>", "fields": {...}}}`` with one entry per constructor field;
nested events and other frozen dataclasses (check-in providers, base mechanisms) nest the same way. Values
that plain JSON cannot say exactly are tagged: ``{"tuple": [...]}``, ``{"float": "inf" | "-inf" | "nan"}``,
``{"ndarray": {"dtype", "shape", "data"}}`` (bool, integer and float arrays only), ``{"numpy": {"dtype",
"value"}}`` for numpy scalars and ``{"dict": [[key, value], ...]}``. Finite floats are written with Python's
shortest round-trip repr, so decoding gives back bit-identical values.

Decoding imports nothing outside ``secagg_dp.accounting.``: a type name must start with that prefix, name a
class defined at the top level of its module (no re-exports, no nested classes) that is a dataclass, and the
top-level value must be a :class:`PrivacyEvent`. Opening a ledger therefore never imports or runs code a file
names. Every class is rebuilt through its constructor, so its ``__post_init__`` validation runs again.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
from typing import Any

import numpy as np

from secagg_dp.accounting.core.events import PrivacyEvent
from secagg_dp.errors import ParameterError

__all__ = ["ALLOWED_TYPE_PREFIX", "event_to_json", "event_from_json", "encode_value", "decode_value"]

#: Only classes in modules under this package prefix are ever imported or built by :func:`event_from_json`.
ALLOWED_TYPE_PREFIX = "secagg_dp.accounting."

_ARRAY_KINDS = frozenset("biuf")  # bool, signed and unsigned integers, floats: no object or string arrays
_MAX_DEPTH = 64


def _type_name(cls: type) -> str:
    name = f"{cls.__module__}.{cls.__qualname__}"
    if not cls.__module__.startswith(ALLOWED_TYPE_PREFIX) or cls.__qualname__ != cls.__name__:
        raise ParameterError(
            f"Cannot persist an instance of {name}: only top-level classes of modules under "
            f"{ALLOWED_TYPE_PREFIX!r} are stored (decoding imports nothing else)."
        )
    return name


def _float(x: float) -> float | dict[str, str]:
    if math.isfinite(x):
        return x
    return {"float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}


def encode_value(value: Any, _depth: int = 0) -> Any:
    """JSON-ready, exactly invertible form of ``value`` (see the module docstring for the tags)."""
    if _depth > _MAX_DEPTH:
        raise ParameterError(f"Cannot persist a value nested deeper than {_MAX_DEPTH} levels.")
    d = _depth + 1
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, np.generic):  # before float/int: np.float64 is a float subclass
        if value.dtype.kind not in _ARRAY_KINDS:
            raise ParameterError(f"Cannot persist a numpy scalar of dtype {value.dtype}.")
        return {"numpy": {"dtype": value.dtype.str, "value": encode_value(value.item(), d)}}
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float(float(value))
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise ParameterError(f"Cannot persist a numpy array of dtype {value.dtype}.")
        data = [_float(x) if isinstance(x, float) else x for x in value.ravel().tolist()]
        return {"ndarray": {"dtype": value.dtype.str, "shape": list(value.shape), "data": data}}
    if isinstance(value, tuple):
        return {"tuple": [encode_value(v, d) for v in value]}
    if isinstance(value, list):
        return [encode_value(v, d) for v in value]
    if isinstance(value, dict):
        return {"dict": [[encode_value(k, d), encode_value(v, d)] for k, v in value.items()]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: encode_value(getattr(value, f.name), d) for f in dataclasses.fields(value) if f.init}
        return {"dataclass": {"type": _type_name(type(value)), "fields": fields}}
    raise ParameterError(f"Cannot persist a value of type {type(value).__name__}: {value!r}.")


def _resolve(name: Any) -> type:
    """The dataclass named ``name``, imported only from under :data:`ALLOWED_TYPE_PREFIX`."""
    if not isinstance(name, str) or not name.startswith(ALLOWED_TYPE_PREFIX):
        raise ParameterError(f"Type {name!r} is not under {ALLOWED_TYPE_PREFIX!r}: refused (nothing imported).")
    module_name, _, cls_name = name.rpartition(".")
    if not all(part.isidentifier() for part in name.split(".")):
        raise ParameterError(f"Type {name!r} is not a dotted Python name: refused.")
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        raise ParameterError(f"Type {name!r}: module {module_name!r} does not exist in this version.") from None
    cls = getattr(module, cls_name, None)
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)) or cls.__module__ != module_name:
        raise ParameterError(f"Type {name!r} is not a dataclass defined in {module_name!r}: refused.")
    return cls


def _one_key(obj: dict[str, Any]) -> tuple[str, Any]:
    if len(obj) != 1:
        raise ParameterError(f"Encoded value must be an object with exactly one tag, not keys {sorted(obj)}.")
    return next(iter(obj.items()))


def _decode_float(x: Any) -> float:
    if isinstance(x, dict):
        tag, v = _one_key(x)
        if tag == "float" and v in ("inf", "-inf", "nan"):
            return float(v)
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x)
    raise ParameterError(f"Encoded array element {x!r} is not a number.")


def decode_value(obj: Any, _depth: int = 0) -> Any:
    """Inverse of :func:`encode_value`; raises :class:`ParameterError` on anything it did not write."""
    if _depth > _MAX_DEPTH:
        raise ParameterError(f"Encoded value nested deeper than {_MAX_DEPTH} levels.")
    d = _depth + 1
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ParameterError("Encoded value holds a bare non-finite float; these are tagged.")
        return obj
    if isinstance(obj, list):
        return [decode_value(v, d) for v in obj]
    if not isinstance(obj, dict):
        raise ParameterError(f"Encoded value of type {type(obj).__name__} is not JSON.")
    tag, body = _one_key(obj)
    if tag == "tuple" and isinstance(body, list):
        return tuple(decode_value(v, d) for v in body)
    if tag == "float":
        return _decode_float(obj)
    if tag == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {decode_value(k, d): decode_value(v, d) for k, v in body}
    if tag in ("numpy", "ndarray") and isinstance(body, dict):
        try:
            dtype = np.dtype(body["dtype"])
        except (KeyError, TypeError) as exc:
            raise ParameterError(f"Encoded {tag} has no valid dtype ({exc}).") from None
        if dtype.kind not in _ARRAY_KINDS:
            raise ParameterError(f"Encoded {tag} has dtype {dtype}; only bool, integer and float are read.")
        if tag == "numpy":
            return dtype.type(decode_value(body.get("value"), d))
        shape, data = body.get("shape"), body.get("data")
        if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
            raise ParameterError(f"Encoded ndarray has an invalid shape {shape!r}.")
        if not isinstance(data, list) or len(data) != math.prod(shape):
            raise ParameterError(f"Encoded ndarray of shape {shape} does not hold {math.prod(shape)} values.")
        if dtype.kind == "f":
            values: list[Any] = [_decode_float(x) for x in data]
        elif all(isinstance(x, bool) if dtype.kind == "b" else type(x) is int for x in data):
            values = data
        else:
            raise ParameterError(f"Encoded ndarray of dtype {dtype} holds a value of another type.")
        return np.array(values, dtype=dtype).reshape(shape)
    if tag == "dataclass" and isinstance(body, dict) and set(body) == {"type", "fields"}:
        cls = _resolve(body["type"])
        fields = body["fields"]
        init = {f.name for f in dataclasses.fields(cls) if f.init}
        if not isinstance(fields, dict) or set(fields) != init:
            raise ParameterError(f"Encoded {body['type']} must have the fields {sorted(init)}.")
        kwargs = {k: decode_value(v, d) for k, v in fields.items()}
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"Encoded {body['type']} is invalid: {exc}") from None
    raise ParameterError(f"Encoded value has an unknown or malformed tag {tag!r}.")


def event_to_json(event: PrivacyEvent) -> str:
    """The JSON text of ``event``; :func:`event_from_json` gives back an equal event, bit for bit.

    Refuses (:class:`ParameterError`) an event that is not a dataclass under :data:`ALLOWED_TYPE_PREFIX`, holds
    a value it cannot write exactly, or does not survive the round trip (its text re-encodes differently).
    """
    if not isinstance(event, PrivacyEvent):
        raise ParameterError(f"Argument 'event' must be a PrivacyEvent, not {type(event).__name__}.")
    text = json.dumps(encode_value(event), allow_nan=False, sort_keys=True, separators=(",", ":"))
    back = event_from_json(text)
    if json.dumps(encode_value(back), allow_nan=False, sort_keys=True, separators=(",", ":")) != text:
        raise ParameterError(f"Event {type(event).__name__} does not survive a JSON round trip; cannot persist it.")
    return text


def event_from_json(text: str) -> PrivacyEvent:
    """The event written by :func:`event_to_json`; :class:`ParameterError` for anything else."""
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except (TypeError, ValueError) as exc:
        raise ParameterError(f"Encoded event is not valid JSON ({exc}).") from None
    event = decode_value(obj)
    if not isinstance(event, PrivacyEvent):
        raise ParameterError(f"Encoded value is a {type(event).__name__}, not a PrivacyEvent.")
    return event


def _no_constant(name: str) -> Any:
    raise ValueError(f"bare {name} is not allowed")
