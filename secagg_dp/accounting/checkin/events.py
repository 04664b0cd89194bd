"""The check-in round as a privacy event (frozen, validated), composable by the RDP and check-in accountants."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from secagg_dp._validate import check_int, check_probability
from secagg_dp.accounting.core.events import PrivacyEvent, check_neighbouring
from secagg_dp.accounting.core.rdp import check_orders
from secagg_dp.errors import ParameterError

__all__ = ["CheckinRound"]


def _describe(obj: Any) -> Any:
    """JSON-ready description of a (nested) frozen dataclass such as a check-in provider."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {
            "type": type(obj).__name__,
            **{f.name: _describe(getattr(obj, f.name)) for f in dataclasses.fields(obj)},
        }
    return obj


@dataclass(frozen=True)
class CheckinRound(PrivacyEvent):
    """One round of distributed check-in over ``clients`` clients (Liew, Hasegawa & Takahashi 2022).

    Mechanism: with ``gamma``, each client checks in independently with probability gamma, so K ~ Bin(n, gamma)
    clients are in the round; the released output is K and the base mechanism of ``provider`` run on the K
    participants (e.g. their clipped vectors summed with distributed noise). With ``sample_size`` m instead, a
    uniformly random set of exactly m clients (sampling without replacement). Neighbouring relation and
    sensitivity: the provider's (``replace-one`` of one client, whose clipped vector moves the sum by 2C in L2,
    for the check-in sums of :mod:`secagg_dp.accounting.checkin.bases`; ``add-remove`` of one training sample
    for the local-steps providers).

    RDP (integer orders only), with gamma: eps(a) <= 1/(a-1) log(1 + sum_k P(K=k) expm1((a-1) eps'_k(a)))
    (SCI22 Thm 1 / Eq. 5; Liew, Hasegawa & Takahashi 2022, Thm 2 and 4;
    :func:`secagg_dp.accounting.checkin.mixture.checkin_rdp`),
    eps'_k the provider's k-client term; with m: the k = m term alone, log(1 + expm1((a-1) eps'_m(a)))/(a-1).
    """

    provider: Any  # a secagg_dp.accounting.checkin.mixture PerKProvider (frozen dataclass, hashable)
    clients: int
    gamma: float | None
    sample_size: int | None
    neighbouring: str

    def __post_init__(self) -> None:
        n = check_int("clients", self.clients, lo=1)
        object.__setattr__(self, "clients", n)
        check_neighbouring(self.neighbouring)
        if not callable(getattr(self.provider, "log_expm1_upper", None)):
            raise ParameterError(
                f"Argument 'provider' must be a per-k provider with log_expm1_upper(k_lo, k_hi, orders), "
                f"not {type(self.provider).__name__}."
            )
        if getattr(self.provider, "neighbouring", None) != self.neighbouring:
            raise ParameterError(
                f"Argument 'provider' must be {self.neighbouring!r} like the event, "
                f"not {getattr(self.provider, 'neighbouring', None)!r}."
            )
        if (self.gamma is None) == (self.sample_size is None):
            raise ParameterError("Exactly one of 'gamma' (check-in) and 'sample_size' (fixed-size) must be given.")
        if self.gamma is not None:
            object.__setattr__(self, "gamma", check_probability("gamma", self.gamma, allow_zero=False))
        else:
            object.__setattr__(self, "sample_size", check_int("sample_size", self.sample_size, lo=1, hi=n))

    def rdp(self, orders: Any) -> npt.NDArray[np.float64]:
        a = check_orders(orders)
        ints = a.astype(np.int64)
        if not np.array_equal(ints, a):
            raise ParameterError("Argument 'orders' must be integers for the check-in mixture.")
        return _round_rdp(self, tuple(int(o) for o in ints)).copy()

    def describe(self) -> dict[str, Any]:
        return {
            "type": type(self).__name__,
            "provider": _describe(self.provider),
            "clients": self.clients,
            "gamma": self.gamma,
            "sample_size": self.sample_size,
            "neighbouring": self.neighbouring,
        }


@functools.lru_cache(maxsize=32)
def _round_rdp(event: CheckinRound, orders: tuple[int, ...]) -> npt.NDArray[np.float64]:
    """The per-round curve, computed once per (event, orders): every round of a run spends the same event."""
    from secagg_dp.accounting.checkin import mixture as ck

    o = np.asarray(orders, dtype=np.int64)
    if event.sample_size is not None:
        m = np.array([event.sample_size])
        return np.asarray(np.logaddexp(0.0, event.provider.log_expm1_upper(m, m, o)[0]) / (o - 1.0))
    if event.gamma is None:  # pragma: no cover - construction requires exactly one of gamma and sample_size
        raise ParameterError("A check-in round needs 'gamma' or 'sample_size'.")
    return np.asarray(ck.checkin_rdp(event.provider, event.clients, event.gamma, o))
