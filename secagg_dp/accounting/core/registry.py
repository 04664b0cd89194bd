"""The accountant registry: one class per method behind a name (as Opacus's ``create_accountant``).

:data:`ACCOUNTANTS` maps a method name to its :class:`~secagg_dp.accounting.core.accountant.PrivacyAccountant`
class; :func:`make_accountant` builds one with keyword options (an unknown option is a ``TypeError`` from the
class, never swallowed). Observers are options of the check-in accountants (``observer="server"``,
``ex_post=True``, ``observer="coalition", coalition=Coalition(c, m)``), not separate functions; each class's
docstring cites its bound. Classes load on first use by their dotted path, so importing the registry imports
no accountant, and the core keeps no import of the check-in and shuffle rooms (the same lazy loading as
:mod:`secagg_dp.accounting`'s public names).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from typing import Any

from secagg_dp.accounting.core.accountant import PrivacyAccountant
from secagg_dp.errors import ParameterError

__all__ = ["ACCOUNTANTS", "make_accountant"]

_PATHS: dict[str, str] = {
    "rdp": "secagg_dp.accounting.core.rdp_accountant:RdpAccountant",
    "pld": "secagg_dp.accounting.core.pld_accountant:PLDAccountant",
    "checkin-rdp": "secagg_dp.accounting.checkin.accountant:CheckinRdpAccountant",
    "window": "secagg_dp.accounting.checkin.accountant:CheckinWindowAccountant",
    "checkin-pld": "secagg_dp.accounting.checkin.accountant:CheckinPldAccountant",
    "shuffle": "secagg_dp.accounting.shuffle.certificates:ShuffleAccountant",
    "random-checkin-pld": "secagg_dp.accounting.checkin.random_checkin:RandomCheckinPldAccountant",
    "random-checkin-rdp": "secagg_dp.accounting.checkin.random_checkin:RandomCheckinRdpAccountant",
}


class _Registry(Mapping[str, type[PrivacyAccountant]]):
    """Read-only name -> accountant class map; a class is imported when first looked up."""

    def __getitem__(self, name: str) -> type[PrivacyAccountant]:
        path = _PATHS[name]
        module, cls = path.split(":")
        out: type[PrivacyAccountant] = getattr(importlib.import_module(module), cls)
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(_PATHS)

    def __len__(self) -> int:
        return len(_PATHS)

    def __repr__(self) -> str:
        return f"ACCOUNTANTS({list(_PATHS)})"


#: method name -> accountant class: ``"rdp"`` (RDP of any :class:`PrivacyEvent` with a curve), ``"pld"``
#: (dp-accounting's PLD), ``"checkin-rdp"``, ``"window"``, ``"checkin-pld"`` (the check-in accountant's three
#: methods), ``"shuffle"`` (:class:`ShuffleRound` events, ``method=`` a key of ``SHUFFLE_BOUNDS``) and
#: ``"random-checkin-pld"``, ``"random-checkin-rdp"`` (:class:`RandomCheckinEpoch` events, random check-ins).
ACCOUNTANTS: Mapping[str, type[PrivacyAccountant]] = _Registry()


def make_accountant(name: str, /, **options: Any) -> PrivacyAccountant:
    """An empty accountant of the method ``name`` (a key of :data:`ACCOUNTANTS`), built with ``options``.

    >>> make_accountant("checkin-rdp", observer="server").method
    'rdp'
    """
    if name not in _PATHS:
        raise ParameterError(f"Argument 'name' must be one of {tuple(_PATHS)}, not {name!r}.")
    return ACCOUNTANTS[name](**options)
