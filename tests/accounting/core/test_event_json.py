"""Events persist exactly: JSON round trip of every public event class, and nothing outside the allow-list loads."""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import pkgutil
import struct
import sys

import numpy as np
import pytest

import secagg_dp.accounting
from secagg_dp.accounting import (
    CheckinRound,
    Composed,
    DDGSum,
    DiscreteGaussian,
    DistributedDiscreteGaussian,
    Gaussian,
    GaussianSum,
    LocalStepsSkellam,
    PerKTable,
    PoissonSampled,
    SampledWithoutReplacement,
    SelfComposed,
    ShuffleRound,
    Skellam,
    SkellamSum,
    SubsampledCheckin,
)
from secagg_dp.accounting.checkin.random_checkin import CentralGaussian, RandomCheckinEpoch
from secagg_dp.accounting.core.event_json import decode_value, encode_value, event_from_json, event_to_json
from secagg_dp.accounting.core.events import PrivacyEvent
from secagg_dp.accounting.core.ledger import RecordedRdp
from secagg_dp.errors import ParameterError

G = Gaussian(1.5, 1.0, "add-remove")
G1 = Gaussian(0.1 + 0.2, 3.0, "replace-one")  # 0.30000000000000004: the shortest repr must survive
TABLE = PerKTable(
    table=np.array([[0.0, 0.0], [np.inf, 1.0 / 3.0], [0.25, 1e-300]]), orders=np.array([2, 3], dtype=np.int64)
)

EXAMPLES: dict[type, list[PrivacyEvent]] = {
    Gaussian: [G, G1, Gaussian(1e-300, 0.0, "add-remove")],
    DiscreteGaussian: [DiscreteGaussian(7.25, 2.0, "replace-one")],
    DistributedDiscreteGaussian: [DistributedDiscreteGaussian(10**6, 5.0, 2**20, 3.0, 9.0, "add-remove")],
    Skellam: [Skellam(100.0, 3.0, 9.0, "add-remove")],
    PoissonSampled: [PoissonSampled(0.01, G), PoissonSampled(0.5, Skellam(4.0, 1.0, 1.0, "add-remove"))],
    SampledWithoutReplacement: [SampledWithoutReplacement(3, 10**9, G1)],
    Composed: [Composed((G, PoissonSampled(0.2, G), SelfComposed(PoissonSampled(0.1, G), 4)))],
    SelfComposed: [SelfComposed(Composed((G, G)), 0), SelfComposed(G, 10**12)],
    CheckinRound: [
        CheckinRound(SubsampledCheckin(DDGSum(3.0, 16, 2.0, 8.0), n=100), 100, 0.1, None, "replace-one"),
        CheckinRound(SubsampledCheckin(GaussianSum(1.0), n=50, amplification="thm9"), 50, None, 7, "replace-one"),
        CheckinRound(
            SubsampledCheckin(
                LocalStepsSkellam(64.0, 2.0, 4.0, steps=3, sample_rate=0.5),
                n=1000,
                amplification="joint-convexity",
                neighbouring="add-remove",
            ),
            1000,
            0.25,
            None,
            "add-remove",
        ),
        CheckinRound(SubsampledCheckin(SkellamSum(9.0, 2.0, 4.0), n=20), 20, 1.0, None, "replace-one"),
        CheckinRound(TABLE, 2, 0.5, None, "replace-one"),  # numpy arrays (float with inf, int64) inside
    ],
    RecordedRdp: [RecordedRdp((2.0, 2.5, 64.0), (0.0, 0.125, 1e300), "add-remove")],
    ShuffleRound: [ShuffleRound(1000, 2.0, 0.1), ShuffleRound(60000, 9.48)],
    RandomCheckinEpoch: [
        RandomCheckinEpoch(SkellamSum(9.0, 2.0, 4.0), 1000, 0.5, 10, slots=2),
        RandomCheckinEpoch(CentralGaussian(1.0, "add-remove"), 100, 1.0, 100, neighbouring="add-remove"),
    ],
}


def _public_event_classes() -> set[type]:
    """Every public PrivacyEvent subclass defined in a module of secagg_dp.accounting (walked, not listed)."""
    found: set[type] = set()
    for info in pkgutil.walk_packages(secagg_dp.accounting.__path__, "secagg_dp.accounting."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                isinstance(obj, type)
                and issubclass(obj, PrivacyEvent)
                and obj is not PrivacyEvent
                and obj.__module__ == info.name
                and not name.startswith("_")
            ):
                found.add(obj)
    return found


def _same(a: object, b: object) -> bool:
    """Bit-for-bit equality: same types, float bits, array dtypes and shapes, recursively through dataclasses."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray)
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if isinstance(a, np.generic):
        return a.dtype == b.dtype and a.tobytes() == b.tobytes()
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if dataclasses.is_dataclass(a):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    return a == b


def test_examples_cover_every_public_event_class():
    missing = _public_event_classes() - set(EXAMPLES)
    assert not missing, f"add round-trip examples for {sorted(c.__name__ for c in missing)}"


@pytest.mark.parametrize("event", [e for evs in EXAMPLES.values() for e in evs], ids=lambda e: type(e).__name__)
def test_round_trip_is_exact(event):
    text = event_to_json(event)
    back = event_from_json(text)
    assert _same(back, event)
    assert event_to_json(back) == text
    if not (isinstance(event, CheckinRound) and isinstance(event.provider, PerKTable)):  # arrays: no ==
        assert back.describe() == event.describe()
    json.loads(text)  # strict JSON: no NaN / Infinity literals
    assert "Infinity" not in text and "NaN" not in text


def test_round_trip_keeps_the_rdp_curve_bit_for_bit():
    orders = np.arange(2, 33, dtype=np.float64)
    for event in (*EXAMPLES[Composed], *EXAMPLES[PoissonSampled], *EXAMPLES[SampledWithoutReplacement]):
        assert event.rdp(orders).tobytes() == event_from_json(event_to_json(event)).rdp(orders).tobytes()


@pytest.mark.parametrize(
    "value",
    [
        np.float64(0.1),
        np.float32(1.5),
        np.int64(-(2**62)),
        np.uint8(255),
        np.bool_(True),
        np.array([[1.0, -np.inf], [np.nan, 5e-324]]),
        np.arange(6, dtype=np.int32).reshape(2, 3),
        np.zeros((0, 3)),
        (1, (2.5, None), [True, "x"]),
        {"a": 1, 2: (3.0,)},
        math.inf,
        -math.inf,
        math.nan,
        -0.0,
        10**40,
    ],
    ids=repr,
)
def test_values_round_trip_exactly(value):
    text = json.dumps(encode_value(value), allow_nan=False)
    assert _same(decode_value(json.loads(text)), value) or (isinstance(value, float) and math.isnan(value))
    if isinstance(value, float) and math.isnan(value):
        assert math.isnan(decode_value(json.loads(text)))


def _spec(type_name: str, fields: dict | None = None) -> str:
    return json.dumps({"dataclass": {"type": type_name, "fields": fields or {}}})


@pytest.mark.parametrize(
    "type_name",
    [
        "antigravity.Anything",  # outside the prefix: never imported
        "os.system",
        "builtins.eval",
        "secagg_dp.errors.ParameterError",
        "secagg_dp.accounting_evil.X",
        "secagg_dp.accounting.core.events.check_neighbouring",  # a function, not a dataclass
        "secagg_dp.accounting.Gaussian",  # a re-export: only the defining module's name is read
        "secagg_dp.accounting.core.no_such_module.X",
        "secagg_dp.accounting.core.events.Gaussian.__init__",
        "secagg_dp.accounting.core.accountant.Certificate",  # a dataclass, but not an event
    ],
)
def test_types_outside_the_allow_list_are_refused(type_name):
    before = set(sys.modules)
    with pytest.raises(ParameterError):
        event_from_json(_spec(type_name))
    assert "antigravity" not in sys.modules and not {m for m in set(sys.modules) - before if "evil" in m}


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"dataclass": 1}',
        '{"dataclass": {"type": "secagg_dp.accounting.core.events.Gaussian", "fields": {"sigma": 1.0}}}',
        _spec("secagg_dp.accounting.core.events.Gaussian", {"sigma": -1.0, "l2_sensitivity": 1.0, "neighbouring": "x"}),
        _spec(
            "secagg_dp.accounting.core.events.Gaussian",
            {"sigma": "1.0", "l2_sensitivity": 1.0, "neighbouring": "add-remove"},
        ),
        '{"dataclass": {"type": "secagg_dp.accounting.core.events.Gaussian", "fields": {"sigma": NaN, '
        '"l2_sensitivity": 1.0, "neighbouring": "add-remove"}}}',
        '{"ndarray": {"dtype": "|O", "shape": [1], "data": [1]}}',
        '{"tuple": [1], "extra": 2}',
    ],
)
def test_malformed_input_is_a_parameter_error(text):
    with pytest.raises(ParameterError):
        event_from_json(text)


def test_unpersistable_events_are_refused_before_anything_is_written():
    @dataclasses.dataclass(frozen=True)
    class Local(PrivacyEvent):  # defined outside secagg_dp.accounting: decoding would have to import it
        neighbouring: str = "add-remove"

    with pytest.raises(ParameterError, match="only top-level classes"):
        event_to_json(Local())
    with pytest.raises(ParameterError, match="Cannot persist"):
        encode_value(object())
