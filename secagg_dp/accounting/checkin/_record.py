"""What the check-in certificate records (:class:`~secagg_dp.accounting.checkin.mixture.CheckinCertificate`,
:class:`~secagg_dp.accounting.checkin.pld.PLDCertificate`) share: the coalition fields kept in ``detail``,
equality on ``detail``, and the plain-certificate view."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from secagg_dp.accounting.core.accountant import Certificate, _field_or_detail
from secagg_dp.errors import ParameterError

__all__: list[str] = []


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
