"""What the check-in certificate records (:class:`~secagg_dp.accounting.checkin.mixture.CheckinCertificate`,
:class:`~secagg_dp.accounting.checkin.pld.PLDCertificate`) share: the coalition fields kept in ``detail``,
equality on ``detail``, and the plain-certificate view."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, Generic, TypeVar, overload

from secagg_dp.accounting.core.accountant import Certificate, _field_or_detail
from secagg_dp.errors import ParameterError

__all__: list[str] = []

_T = TypeVar("_T")


class DetailField(Generic[_T]):
    """A read-only certificate attribute kept in ``detail`` under its own name, ``convert`` applied on read
    (a property without the boilerplate; ``doc`` is its docstring)."""

    def __init__(self, convert: Callable[[Any], _T], doc: str) -> None:
        self._convert = convert
        self._name = ""
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> DetailField[_T]: ...
    @overload
    def __get__(self, obj: Certificate, owner: type | None = None) -> _T: ...
    def __get__(self, obj: Certificate | None, owner: type | None = None) -> _T | DetailField[_T]:
        if obj is None:
            return self
        return self._convert(obj.detail[self._name])


def as_is(value: Any) -> Any:
    """The stored value unchanged (a :class:`DetailField` whose value is set, already typed, by the constructor)."""
    return value


def int_pair(w: Any) -> tuple[int, int]:
    """A client-count window [k_lo, k_hi] as a pair of ints."""
    return (int(w[0]), int(w[1]))


def coalition_detail(observer: str, colluders: Any, min_sum: Any, detail: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``detail`` entries of observer ``"coalition"`` ({} for the others), checked: ``colluders`` and
    ``min_sum`` are given exactly for that observer (docs/accounting/observers.md)."""
    colluders = _field_or_detail("colluders", colluders, detail, None)
    min_sum = _field_or_detail("min_sum", min_sum, detail, None)
    if (observer == "coalition") != (colluders is not None and min_sum is not None):
        raise ParameterError(
            "Arguments 'colluders' and 'min_sum' must be given exactly for observer 'coalition', "
            f"not colluders={colluders!r}, min_sum={min_sum!r} for observer {observer!r}."
        )
    return {"colluders": colluders, "min_sum": min_sum} if observer == "coalition" else {}


class DetailCertificate(Certificate):
    """A :class:`Certificate` whose former fields live in ``detail``: equality compares ``detail`` as well."""

    rounds = DetailField(int, "T, the number of rounds certified.")

    @property
    def colluders(self) -> int | None:
        """Observer ``"coalition"``: c corrupt clients colluding with the server (None otherwise)."""
        return self.detail.get("colluders")

    @property
    def min_sum(self) -> int | None:
        """Observer ``"coalition"``: the smallest sum the protocol lets finish (None otherwise)."""
        return self.detail.get("min_sum")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self) or not isinstance(other, Certificate):
            return NotImplemented
        return super().__eq__(other) is True and dict(self.detail) == dict(other.detail)

    __hash__ = Certificate.__hash__

    def as_certificate(self) -> Certificate:
        """The same numbers as a plain :class:`~secagg_dp.accounting.core.accountant.Certificate` (whose
        ``as_dict()`` is the general layout)."""
        return Certificate(**{f.name: getattr(self, f.name) for f in fields(Certificate)})
