"""Distributed check-in accountant, built on :mod:`secagg_dp.accounting.core`.

Holds the check-in round event (:mod:`.events`) and its accountant under the core contract
(:mod:`.accountant`: rdp, window and pld methods), the binomial check-in mixture and window certificate
(:mod:`.mixture`), the per-k base mechanisms (:mod:`.bases`: Gaussian, Skellam and distributed discrete
Gaussian sums) and the one provider builder (:mod:`.providers`), binomial tail math (:mod:`.tails`), dropout
models (:mod:`.dropout`), local steps (:mod:`.local_steps`), per-observer certificates (:mod:`.observers`; the
coalition of an active server with corrupt clients: :mod:`.coalition`), labelled baselines (:mod:`.baselines`)
and the privacy-loss-distribution accountant (:mod:`.pld`); random check-ins (Balle et al. 2020) in
:mod:`.random_checkin`. It imports the core and never the shuffle
accountants. ``CHECKIN_ORDERS`` is the check-in order grid
(:func:`.mixture.checkin_orders`: integers 2..256, then every 16th to 1024), not the core's ``DEFAULT_ORDERS``;
``DEFAULT_ORDERS`` here is its former name (the same array).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from secagg_dp._lazy import lazy_room

if TYPE_CHECKING:  # the names, for type checkers and the API reference; at run time they load on first use
    from secagg_dp.accounting.checkin.accountant import *  # noqa: F403
    from secagg_dp.accounting.checkin.baselines import *  # noqa: F403
    from secagg_dp.accounting.checkin.bases import *  # noqa: F403
    from secagg_dp.accounting.checkin.coalition import *  # noqa: F403
    from secagg_dp.accounting.checkin.dropout import *  # noqa: F403
    from secagg_dp.accounting.checkin.events import *  # noqa: F403
    from secagg_dp.accounting.checkin.local_steps import *  # noqa: F403
    from secagg_dp.accounting.checkin.mixture import *  # noqa: F403
    from secagg_dp.accounting.checkin.observers import *  # noqa: F403
    from secagg_dp.accounting.checkin.pld import *  # noqa: F403
    from secagg_dp.accounting.checkin.providers import *  # noqa: F403
    from secagg_dp.accounting.checkin.random_checkin import *  # noqa: F403
    from secagg_dp.accounting.checkin.tails import *  # noqa: F403

_ALL_ORDER = (
    "events",
    "accountant",
    "mixture",
    "bases",
    "tails",
    "dropout",
    "local_steps",
    "baselines",
    "observers",
    "coalition",
    "pld",
    "providers",
    "random_checkin",
)
# bound in alphabetical order (a later module's name wins, as with the star imports)
_MODULES = tuple(sorted(_ALL_ORDER))


# Public names and ``__all__`` load with the room's modules on first use (PEP 562): importing one module of the
# room (as ``secagg-dp account checkin`` does) no longer imports all of them.
__getattr__, __dir__ = lazy_room(__name__, _MODULES, _ALL_ORDER, globals())
