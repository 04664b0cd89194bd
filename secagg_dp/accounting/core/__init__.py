"""Accounting core: the pieces every accountant is built from.

Holds privacy events with an explicit neighbouring relation (:mod:`.events`), closed-form RDP curves
(:mod:`.rdp`), subsampling amplification (:mod:`.subsampling`), the Rényi divergence of the subsampled Gaussian's
dominating pair (:mod:`.pairs`), log-space kernels (:mod:`.logspace`),
RDP -> (epsilon, delta) conversion (:mod:`.conversion`), noise calibration (:mod:`.calibration`), the accountant
contract and certificate record (:mod:`.accountant`), the RDP and PLD accountants (:mod:`.rdp_accountant`,
:mod:`.pld_accountant`), conversion to and from dp-accounting's events (:mod:`.interop`) and the
persistent privacy ledger (:mod:`.ledger`). It may import only ``secagg_dp`` foundations (errors,
validators) and third-party numerics; it never imports the check-in or shuffle accountants.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from secagg_dp._lazy import lazy_room

if TYPE_CHECKING:  # the names, for type checkers and the API reference; at run time they load on first use
    from secagg_dp.accounting.core.accountant import *  # noqa: F403
    from secagg_dp.accounting.core.calibration import *  # noqa: F403
    from secagg_dp.accounting.core.conversion import *  # noqa: F403
    from secagg_dp.accounting.core.events import *  # noqa: F403
    from secagg_dp.accounting.core.interop import *  # noqa: F403
    from secagg_dp.accounting.core.ledger import *  # noqa: F403
    from secagg_dp.accounting.core.logspace import *  # noqa: F403
    from secagg_dp.accounting.core.pairs import *  # noqa: F403
    from secagg_dp.accounting.core.pld_accountant import *  # noqa: F403
    from secagg_dp.accounting.core.rdp import *  # noqa: F403
    from secagg_dp.accounting.core.rdp_accountant import *  # noqa: F403
    from secagg_dp.accounting.core.registry import *  # noqa: F403
    from secagg_dp.accounting.core.subsampling import *  # noqa: F403

_ALL_ORDER = (
    "events",
    "rdp",
    "subsampling",
    "pairs",
    "logspace",
    "conversion",
    "calibration",
    "accountant",
    "rdp_accountant",
    "pld_accountant",
    "registry",
    "interop",
    "ledger",
)
# bound in alphabetical order (a later module's name wins, as with the star imports)
_MODULES = tuple(sorted(_ALL_ORDER))


# Public names and ``__all__`` load with the room's modules on first use (PEP 562): importing one module of the
# room (as ``secagg-dp account checkin`` does) no longer imports all of them.
__getattr__, __dir__ = lazy_room(__name__, _MODULES, _ALL_ORDER, globals())
