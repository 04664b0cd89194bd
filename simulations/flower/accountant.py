"""Our accounting behind Flower's ``flwr.serverapp.PrivacyAccountant`` protocol: :class:`SecAggDPAccountant`.

Flower (1.35 on; tested with 1.41) defines ``PrivacyAccountant``, a typing ``Protocol`` (not runtime-checkable)
with ``config``, ``num_releases``, ``compose(event, count=1)``, ``get_epsilon(delta)``, ``get_delta(epsilon)``,
``get_privacy_spent(delta=None)``, ``would_exceed(event, max_epsilon=None, count=1)``, ``state_dict()`` and
``load_state_dict(state)``, and an ``RdpAccountant`` for sampled Gaussian releases (``GaussianPrivacyEvent``)
only. :class:`SecAggDPAccountant` satisfies the protocol structurally (no ``flwr`` import at module level; this
module imports it only inside :func:`flower_types`, and nothing in ``secagg_dp`` imports it at all) and composes

* our check-in rounds (:class:`~secagg_dp.accounting.checkin.CheckinRound`, or a ``SelfComposed`` of one):
  distributed discrete Gaussian / Skellam sums, under-delivered rounds (dropouts), add-then-remove enforcement,
  local steps, as the check-in accountant's ``"rdp"`` method composes them for the observer ``"analyst"``,
  ``"server"`` or ``"coalition"`` (the round's base mechanism re-wrapped by
  :func:`~secagg_dp.accounting.checkin.server_view_provider` /
  :func:`~secagg_dp.accounting.checkin.coalition_view_provider`, exactly as
  :class:`~secagg_dp.accounting.checkin.CheckinAccountant` does);
* Flower's ``GaussianPrivacyEvent(noise_multiplier z, sample_size m, population_size N)``, read exactly as
  Flower's ``RdpAccountant`` reads it (it hands dp-accounting ``GaussianDpEvent(z)``, so z is the noise std over
  the L2 sensitivity *under the configured relation*): Poisson sampling -> ``PoissonSampled(m/N, Gaussian(z, 1,
  add-remove))`` (Mironov, Talwar & Zhang 2019); sampling without replacement -> ``SampledWithoutReplacement(m,
  N, Gaussian(z, 1, replace-one))`` (Wang, Balle & Kasiviswanathan 2019, Thm 27); no amplification ->
  ``Gaussian(z, 1, add-remove)`` (Mironov 2017, Prop. 7). Caution (google/differential-privacy issue #378): a
  sum of updates clipped to C has replace-one sensitivity 2C, so a z stated relative to C must be halved
  before it is given to either accountant under replace-one.

Neighbouring relation: the config's (Flower pairs Poisson sampling and no amplification with add-or-remove-one,
sampling without replacement with replace-one); every composed event must be stated under it (our check-in sums
are replace-one of one client, local steps add-remove of one sample). Our rounds carry their own sampling model
(check-in probability gamma or a fixed sample of m), analysed exactly; ``config.sampling_method`` says how
Flower's events are read. RDP curves add over adaptive composition (Mironov 2017, Prop. 1) and convert to
(epsilon, delta) by Canonne, Kamath & Steinke 2020, Prop. 12. The check-in mixture has integer orders only; at
a fractional order alpha a round is charged its RDP at ceil(alpha), an upper bound because RDP is non-decreasing
in the order (van Erven & Harremoës 2014, Thm 3). Every number is an upper bound for the named observer.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp.accounting.core.conversion import dp_delta, rdp_to_dp
from secagg_dp.accounting.core.event_json import decode_value, encode_value
from secagg_dp.accounting.core.events import (
    Gaussian,
    PoissonSampled,
    PrivacyEvent,
    SampledWithoutReplacement,
    SelfComposed,
)
from secagg_dp.errors import ParameterError, PrivacyBudgetExceeded

__all__ = [
    "ACCOUNTING_METHOD",
    "FLOWER_RDP_ORDERS",
    "DEFAULT_ORDERS",
    "STATE_SCHEMA_VERSION",
    "NeighboringRelation",
    "SamplingMethod",
    "PrivacyConfig",
    "GaussianPrivacyEvent",
    "PrivacySpent",
    "SecAggDPAccountant",
    "flower_types",
    "workflow_accountant",
    "admit_round",
    "save_state",
    "load_state",
]

log = logging.getLogger(__name__)

#: ``PrivacySpent.accounting_method`` and the state's ``backend``.
ACCOUNTING_METHOD = "secagg-dp-rdp"
STATE_SCHEMA_VERSION = 1

#: dp-accounting's ``RdpAccountant`` default orders, which Flower's ``RdpAccountant`` uses: 1.1, 1.2, ..., 10.9,
#: 11, ..., 63, 128, 256, 512, 1024.
FLOWER_RDP_ORDERS: npt.NDArray[np.float64] = np.array(
    [1 + x / 10.0 for x in range(1, 100)] + list(range(11, 64)) + [128, 256, 512, 1024], dtype=np.float64
)


def _default_orders() -> npt.NDArray[np.float64]:
    from secagg_dp.accounting.checkin.mixture import CHECKIN_ORDERS

    return np.union1d(np.asarray(CHECKIN_ORDERS, dtype=np.float64), FLOWER_RDP_ORDERS)


#: The union of the check-in grid (integers 2..256, every 16th to 1024) and :data:`FLOWER_RDP_ORDERS`.
DEFAULT_ORDERS: npt.NDArray[np.float64] = _default_orders()


# ---- Flower's value types, local stand-ins when flwr is absent ---------------------------------------------------


class NeighboringRelation(enum.StrEnum):
    """Same values as ``flwr.serverapp.NeighboringRelation``."""

    ADD_OR_REMOVE_ONE = "add-or-remove-one"
    REPLACE_ONE = "replace-one"


class SamplingMethod(enum.StrEnum):
    """Same values as ``flwr.serverapp.SamplingMethod``."""

    POISSON = "poisson"
    WITHOUT_REPLACEMENT = "without-replacement"
    NO_AMPLIFICATION = "no-amplification"


#: (sampling_method, neighboring_relation) pairs Flower's PrivacyConfig accepts
_SUPPORTED_MODELS = {
    ("poisson", "add-or-remove-one"),
    ("without-replacement", "replace-one"),
    ("no-amplification", "add-or-remove-one"),
}
_OUR_RELATION = {"add-or-remove-one": "add-remove", "replace-one": "replace-one"}


def _prob(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < float(value) < 1.0:
        raise ParameterError(f"Argument {name!r} must be a number strictly between 0 and 1, not {value!r}.")
    return float(value)


def _pos_finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ParameterError(f"Argument {name!r} must be a positive finite number, not {value!r}.")
    return float(value)


def _pos_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ParameterError(f"Argument {name!r} must be a positive integer, not {value!r}.")
    return int(value)


def _enum_value(name: str, value: Any, allowed: type[enum.Enum]) -> str:
    raw = getattr(value, "value", value)
    if raw not in {m.value for m in allowed}:
        raise ParameterError(f"Argument {name!r} must be one of {[m.value for m in allowed]}, not {value!r}.")
    return str(raw)


@dataclasses.dataclass(frozen=True)
class PrivacyConfig:
    """Stand-in for ``flwr.serverapp.PrivacyConfig`` (same fields, same supported models) when flwr is absent."""

    target_delta: float
    population_size: int
    neighboring_relation: NeighboringRelation
    sampling_method: SamplingMethod
    max_epsilon: float | None = None

    def __post_init__(self) -> None:
        _prob("target_delta", self.target_delta)
        _pos_int("population_size", self.population_size)
        rel = NeighboringRelation(_enum_value("neighboring_relation", self.neighboring_relation, NeighboringRelation))
        smp = SamplingMethod(_enum_value("sampling_method", self.sampling_method, SamplingMethod))
        object.__setattr__(self, "neighboring_relation", rel)
        object.__setattr__(self, "sampling_method", smp)
        if self.max_epsilon is not None:
            _pos_finite("max_epsilon", self.max_epsilon)
        if (smp.value, rel.value) not in _SUPPORTED_MODELS:
            raise ParameterError(
                f"Argument 'sampling_method' {smp.value!r} is not analysed with neighboring_relation {rel.value!r}; "
                f"supported pairs: {sorted(_SUPPORTED_MODELS)}."
            )


@dataclasses.dataclass(frozen=True)
class GaussianPrivacyEvent:
    """Stand-in for ``flwr.serverapp.GaussianPrivacyEvent``: ``noise_multiplier`` z, ``sample_size`` m <=
    ``population_size`` N (Poisson: expected size, rate m/N; without replacement: the exact size)."""

    noise_multiplier: float
    sample_size: int
    population_size: int

    def __post_init__(self) -> None:
        _pos_finite("noise_multiplier", self.noise_multiplier)
        _pos_int("sample_size", self.sample_size)
        _pos_int("population_size", self.population_size)
        if self.sample_size > self.population_size:
            raise ParameterError(
                f"Argument 'sample_size' must be at most population_size = {self.population_size}, "
                f"not {self.sample_size}."
            )


@dataclasses.dataclass(frozen=True)
class PrivacySpent:
    """Stand-in for ``flwr.serverapp.PrivacySpent``."""

    epsilon: float
    delta: float
    num_releases: int
    accounting_method: str
    optimal_order: float | None = None


@functools.lru_cache(maxsize=1)
def flower_types() -> dict[str, Any]:
    """``PrivacyConfig``, ``PrivacySpent``, ``GaussianPrivacyEvent``, ``NeighboringRelation`` and
    ``SamplingMethod`` from ``flwr.serverapp`` when flwr is importable, else this module's stand-ins."""
    names = ("PrivacyConfig", "PrivacySpent", "GaussianPrivacyEvent", "NeighboringRelation", "SamplingMethod")
    try:
        import flwr.serverapp as fs

        return {n: getattr(fs, n) for n in names}
    except (ImportError, AttributeError):
        return {n: globals()[n] for n in names}


# ---- the accountant ------------------------------------------------------------------------------------------


def _config_dict(config: Any) -> dict[str, Any]:
    """The five config fields as JSON values, validated (any object with Flower's field names)."""
    try:
        local = PrivacyConfig(
            target_delta=config.target_delta,
            population_size=config.population_size,
            neighboring_relation=config.neighboring_relation,
            sampling_method=config.sampling_method,
            max_epsilon=config.max_epsilon,
        )
    except AttributeError as exc:
        raise ParameterError(f"Argument 'config' must have PrivacyConfig's fields ({exc}).") from None
    return {
        "target_delta": float(local.target_delta),
        "population_size": int(local.population_size),
        "neighboring_relation": local.neighboring_relation.value,
        "sampling_method": local.sampling_method.value,
        "max_epsilon": None if local.max_epsilon is None else float(local.max_epsilon),
    }


_GAUSSIAN_FIELDS = {"noise_multiplier", "sample_size", "population_size"}


def _gaussian_fields(event: Any) -> dict[str, Any] | None:
    """Flower's event fields (validated) if ``event`` looks like a ``GaussianPrivacyEvent``, else None."""
    if isinstance(event, PrivacyEvent) or not all(hasattr(event, f) for f in _GAUSSIAN_FIELDS):
        return None
    ev = GaussianPrivacyEvent(event.noise_multiplier, event.sample_size, event.population_size)
    return {
        "noise_multiplier": float(ev.noise_multiplier),
        "sample_size": ev.sample_size,
        "population_size": ev.population_size,
    }


class SecAggDPAccountant:
    """Flower's ``PrivacyAccountant`` protocol over our events (module docstring for the mathematics).

    ``config``: Flower's ``PrivacyConfig`` (or this module's stand-in, or any object with its fields).
    ``observer``: ``"analyst"`` (the released aggregate), ``"server"`` (also who took part) or ``"coalition"``
    (the active server with ``coalition`` = :class:`~secagg_dp.accounting.checkin.Coalition` (c, m) colluders;
    docs/accounting/observers.md); it applies to our check-in rounds. Flower's Gaussian releases have no
    participation to reveal beyond what their sampling model states, so they are charged as Flower does.
    ``orders``: Rényi orders (default :data:`DEFAULT_ORDERS`). Bad input raises :class:`ParameterError`
    (a ``ValueError``, as Flower's accountant raises).
    """

    def __init__(self, config: Any, *, observer: str = "analyst", coalition: Any = None, orders: Any = None) -> None:
        from secagg_dp.accounting.checkin import CheckinAccountant
        from secagg_dp.accounting.core.rdp import check_orders

        self._cfg = _config_dict(config)
        self._relation = _OUR_RELATION[self._cfg["neighboring_relation"]]
        a = check_orders(DEFAULT_ORDERS if orders is None else orders).copy()
        a.setflags(write=False)
        self._orders = a
        self._int_orders = np.unique(np.ceil(a))  # the check-in mixture's orders: ceil of every order
        # validates check-in rounds (relation, observer view, coalition) exactly as the check-in accountant does
        self._checkin = CheckinAccountant(
            "rdp", self._relation, orders=self._int_orders, observer=observer, coalition=coalition
        )
        self._observer = self._checkin.observer
        self._coalition = self._checkin.coalition
        self._rdp: npt.NDArray[np.float64] = np.zeros_like(a)
        self._history: list[tuple[str, Any, int]] = []  # (kind, event, count); kind "flower-gaussian" | "secagg-dp"

    # -- protocol properties --
    @property
    def config(self) -> Any:
        """The privacy configuration: flwr's ``PrivacyConfig`` when flwr is importable, else the stand-in."""
        t = flower_types()
        c = self._cfg
        return t["PrivacyConfig"](
            target_delta=c["target_delta"],
            population_size=c["population_size"],
            neighboring_relation=t["NeighboringRelation"](c["neighboring_relation"]),
            sampling_method=t["SamplingMethod"](c["sampling_method"]),
            max_epsilon=c["max_epsilon"],
        )

    @property
    def num_releases(self) -> int:
        """Releases composed so far (a ``count`` of k is k releases; a ``SelfComposed`` round counts its reps)."""
        return sum(count * self._reps(kind, ev) for kind, ev, count in self._history)

    @property
    def observer(self) -> str:
        """Who the certificate protects against (our rounds): ``analyst``, ``server`` or ``coalition``."""
        return self._observer

    @property
    def orders(self) -> npt.NDArray[np.float64]:
        """The Rényi orders (read-only)."""
        return self._orders

    @staticmethod
    def _reps(kind: str, event: Any) -> int:
        return int(event.count) if kind == "secagg-dp" and isinstance(event, SelfComposed) else 1

    # -- events to curves --
    def _classify(self, event: Any) -> tuple[str, Any]:
        """("flower-gaussian", fields) or ("secagg-dp", event); refuses anything else before any state change."""
        fields = _gaussian_fields(event)
        n = self._cfg["population_size"]
        if fields is not None:
            if fields["population_size"] != n:
                raise ParameterError(
                    f"Argument 'event.population_size' must be the config's population_size = {n}, "
                    f"not {fields['population_size']}."
                )
            return "flower-gaussian", fields
        if not isinstance(event, PrivacyEvent):
            raise ParameterError(
                "Argument 'event' must be Flower's GaussianPrivacyEvent or a CheckinRound (or a SelfComposed "
                f"of one), not {type(event).__name__}."
            )
        bad = self._checkin.unsupported(event)
        if bad is not None:
            raise ParameterError(
                f"Argument 'event' ({type(event).__name__}) cannot be composed here: {bad[1]} "
                f"(config neighboring_relation {self._cfg['neighboring_relation']!r}, observer {self._observer!r})."
            )
        clients = getattr(event.event if isinstance(event, SelfComposed) else event, "clients", None)
        if clients != n:
            raise ParameterError(f"Argument 'event.clients' must be the config's population_size = {n}, not {clients}.")
        return "secagg-dp", event

    def _core_gaussian(self, fields: Mapping[str, Any]) -> PrivacyEvent:
        """Flower's event as ours, read exactly as Flower's RdpAccountant hands it to dp-accounting."""
        z, m, n = fields["noise_multiplier"], fields["sample_size"], fields["population_size"]
        method = self._cfg["sampling_method"]
        if method == "poisson":
            return PoissonSampled(m / n, Gaussian(z, 1.0, "add-remove"))
        if method == "without-replacement":
            return SampledWithoutReplacement(m, n, Gaussian(z, 1.0, "replace-one"))
        return Gaussian(z, 1.0, "add-remove")

    def _view(self, event: Any) -> tuple[Any, int]:
        """(round as the observer sees it, repetitions), as CheckinAccountant's observer views."""
        reps = 1
        if isinstance(event, SelfComposed):
            event, reps = event.event, int(event.count)
        if self._observer == "analyst":
            return event, reps
        if self._coalition is not None:
            from secagg_dp.accounting.checkin.coalition import coalition_view_provider

            p = coalition_view_provider(event.provider.mechanism, event.clients, self._coalition, event.neighbouring)
        else:
            from secagg_dp.accounting.checkin.observers import server_view_provider

            p = server_view_provider(event.provider.mechanism, event.clients, event.neighbouring)
        return dataclasses.replace(event, provider=p), reps

    def _curve(self, kind: str, event: Any, count: int) -> npt.NDArray[np.float64]:
        """RDP of ``count`` repetitions at this accountant's orders (fractional orders of a round: its ceil)."""
        if kind == "flower-gaussian":
            r = np.asarray(self._core_gaussian(event).rdp(self._orders), dtype=np.float64)
        else:
            view, reps = self._view(event)
            at_int = np.asarray(view.rdp(self._int_orders), dtype=np.float64)
            r = at_int[np.searchsorted(self._int_orders, np.ceil(self._orders))]
            count = count * reps
        if r.shape != self._orders.shape or np.any(np.isnan(r)) or np.any(r < 0):
            raise ParameterError(f"Event {type(event).__name__} gave an invalid RDP curve.")
        with np.errstate(over="ignore"):
            out: npt.NDArray[np.float64] = count * r
        return out

    # -- protocol methods --
    def compose(self, event: Any, count: int = 1) -> None:
        """Compose ``count`` adaptive repetitions of ``event`` (refused before any state change)."""
        c = _pos_int("count", count)
        kind, ev = self._classify(event)
        curve = self._curve(kind, ev, c)
        self._rdp = self._rdp + curve
        self._history.append((kind, ev, c))

    def get_epsilon(self, delta: float) -> float:
        """Cumulative epsilon at ``delta`` (CKS20 Prop. 12 over the orders)."""
        return self._epsilon_order(self._rdp, _prob("delta", delta))[0]

    def get_delta(self, epsilon: float) -> float:
        """Cumulative delta at ``epsilon`` (CKS20 Prop. 12 inverted)."""
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 <= epsilon < math.inf:
            raise ParameterError(f"Argument 'epsilon' must be a non-negative finite number, not {epsilon!r}.")
        return float(dp_delta(self._orders, self._rdp, float(epsilon))[0])

    def _epsilon_order(self, rdp: npt.NDArray[np.float64], delta: float) -> tuple[float, float]:
        eps, order = rdp_to_dp(self._orders, rdp, delta, warn=False)
        return float(eps), float(order)

    def get_privacy_spent(self, delta: float | None = None) -> Any:
        """``PrivacySpent`` (flwr's when importable) at ``delta`` (default: the config's target_delta)."""
        d = self._cfg["target_delta"] if delta is None else _prob("delta", delta)
        eps, order = self._epsilon_order(self._rdp, d)
        return flower_types()["PrivacySpent"](
            epsilon=eps,
            delta=d,
            num_releases=self.num_releases,
            accounting_method=ACCOUNTING_METHOD,
            optimal_order=order,
        )

    def would_exceed(self, event: Any, max_epsilon: float | None = None, count: int = 1) -> bool:
        """True if composing ``count`` x ``event`` would take epsilon at the config's target_delta above
        ``max_epsilon`` (default: the config's ``max_epsilon``). State is not changed."""
        c = _pos_int("count", count)
        limit = self._cfg["max_epsilon"] if max_epsilon is None else max_epsilon
        if limit is None:
            raise ParameterError("Argument 'max_epsilon' is required when the config has no max_epsilon.")
        limit = _pos_finite("max_epsilon", limit)
        kind, ev = self._classify(event)
        projected = self._rdp + self._curve(kind, ev, c)
        return self._epsilon_order(projected, self._cfg["target_delta"])[0] > limit

    # -- state --
    def _body(self) -> dict[str, Any]:
        return {
            "schema_version": STATE_SCHEMA_VERSION,
            "backend": ACCOUNTING_METHOD,
            "config": dict(self._cfg),
            "observer": self._observer,
            "coalition": None if self._coalition is None else self._coalition.as_dict(),
            "orders": [float(o) for o in self._orders],
            "compositions": [
                {"kind": kind, "event": dict(ev) if kind == "flower-gaussian" else encode_value(ev), "count": c}
                for kind, ev, c in self._history
            ],
        }

    def state_dict(self) -> dict[str, object]:
        """JSON-ready state: config, observer, orders and every composition (our rounds in the ledger's exact
        event JSON, :mod:`secagg_dp.accounting.core.event_json`), with a SHA-256 ``digest`` of the rest that
        catches edits and corruption (an integrity check, not authentication: anyone can recompute it)."""
        body = self._body()
        return {**body, "digest": _digest(body)}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore a :meth:`state_dict`: refuses (:class:`ParameterError`, state unchanged) another schema or
        backend, a digest that does not match, or another config, observer, coalition or order grid."""
        if not isinstance(state, Mapping):
            raise ParameterError(f"Argument 'state' must be a mapping, not {type(state).__name__}.")
        body = {k: v for k, v in state.items() if k != "digest"}
        if body.get("schema_version") != STATE_SCHEMA_VERSION or body.get("backend") != ACCOUNTING_METHOD:
            raise ParameterError(
                f"Argument 'state' must be schema_version {STATE_SCHEMA_VERSION} of backend {ACCOUNTING_METHOD!r}, "
                f"not {body.get('schema_version')!r} of {body.get('backend')!r}."
            )
        try:
            digest = _digest(body)
        except (TypeError, ValueError) as exc:
            raise ParameterError(f"Argument 'state' is not JSON data ({exc}).") from None
        if state.get("digest") != digest:
            raise ParameterError("Argument 'state' was altered or corrupted: its digest does not match its content.")
        mine = self._body()
        for key in ("config", "observer", "coalition", "orders"):
            if body.get(key) != mine[key]:
                raise ParameterError(
                    f"Argument 'state' has another {key} than this accountant: {body.get(key)!r} != {mine[key]!r}."
                )
        comps = body.get("compositions")
        if not isinstance(comps, list):
            raise ParameterError("Argument 'state.compositions' must be a list.")
        fresh = self._empty()
        for i, item in enumerate(comps):
            if not (isinstance(item, dict) and set(item) == {"kind", "event", "count"}):
                raise ParameterError(f"Argument 'state.compositions[{i}]' must have kind, event and count.")
            kind, raw = item["kind"], item["event"]
            if kind == "flower-gaussian" and isinstance(raw, dict) and set(raw) == _GAUSSIAN_FIELDS:
                event: Any = GaussianPrivacyEvent(**raw)
            elif kind == "secagg-dp":
                event = decode_value(raw)
            else:
                raise ParameterError(
                    f"Argument 'state.compositions[{i}]' has an unknown kind {kind!r} or a malformed event {raw!r}."
                )
            fresh.compose(event, item["count"])
        self._rdp, self._history = fresh._rdp, fresh._history

    def _empty(self) -> SecAggDPAccountant:
        return type(self)(self.config, observer=self._observer, coalition=self._coalition, orders=self._orders)


def _digest(body: Mapping[str, Any]) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


# ---- what the Flower workflow uses (pure functions, no flwr) ----------------------------------------------------


def workflow_accountant(
    cfg: Any, *, max_epsilon: float | None = None, observer: str = "analyst", coalition: Any = None
) -> SecAggDPAccountant:
    """The accountant of a :class:`~simulations.flower.core.FlowerDPConfig` run: N = ``cfg.population``, m of N
    sampled without replacement, replace-one of one client, target delta ``cfg.delta``."""
    config = PrivacyConfig(
        target_delta=cfg.delta,
        population_size=cfg.population,
        neighboring_relation=NeighboringRelation.REPLACE_ONE,
        sampling_method=SamplingMethod.WITHOUT_REPLACEMENT,
        max_epsilon=max_epsilon,
    )
    return SecAggDPAccountant(config, observer=observer, coalition=coalition)


def admit_round(accountant: SecAggDPAccountant, cfg: Any, round_: int, max_epsilon: float | None = None) -> None:
    """Refuse (log, then :class:`PrivacyBudgetExceeded`) a round that could exceed the budget, before it starts.

    The round's event is not known before it runs (dropouts lower the delivered noise), so the worst case the
    protocol lets finish is checked: ``round_event(cfg, cfg.threshold)`` (fewer than t survivors abort). The
    base mechanisms' RDP is non-increasing in the delivered noise, so admitting it admits every outcome.
    No budget (``max_epsilon`` None and none in the config): every round is admitted.
    """
    from simulations.flower.core import round_event

    limit = max_epsilon if max_epsilon is not None else accountant.config.max_epsilon
    if limit is None:
        return
    worst = round_event(cfg, cfg.threshold)
    if accountant.would_exceed(worst, limit):
        msg = (
            f"round {round_} refused before it started: with {cfg.threshold} of {cfg.sample_size} inputs delivered "
            f"it would take epsilon ({accountant.observer}) above the budget {limit} at delta {cfg.delta} "
            f"(now {accountant.get_epsilon(cfg.delta):.6g} after {accountant.num_releases} releases)"
        )
        log.warning(msg)
        raise PrivacyBudgetExceeded(msg)


def save_state(accountant: SecAggDPAccountant, path: str | Path) -> None:
    """Write ``accountant.state_dict()`` to ``path`` as JSON, atomically (a temporary file, then a rename)."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(accountant.state_dict(), sort_keys=True, allow_nan=False))
    os.replace(tmp, p)


def load_state(accountant: SecAggDPAccountant, path: str | Path) -> bool:
    """Load ``path`` into ``accountant`` if the file exists (True), else leave it empty (False)."""
    p = Path(path)
    if not p.exists():
        return False
    try:
        state = json.loads(p.read_text())
    except ValueError as exc:
        raise ParameterError(f"Argument 'path' ({p}) is not an accountant state file ({exc}).") from None
    accountant.load_state_dict(state)
    return True
