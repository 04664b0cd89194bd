"""Distributed check-in accountant, built on :mod:`secagg_dp.accounting.core`.

Holds the binomial check-in mixture and window certificate (:mod:`.mixture`), the per-k base mechanisms
(:mod:`.bases`: Gaussian, Skellam and distributed discrete Gaussian sums), binomial tail math
(:mod:`.tails`), dropout models (:mod:`.dropout`), local steps (:mod:`.local_steps`), per-observer
certificates (:mod:`.observers`), labelled baselines (:mod:`.baselines`) and the privacy-loss-distribution
accountant (:mod:`.pld`). It imports the core and never the shuffle accountants.
``CHECKIN_ORDERS`` is the check-in order grid (:func:`.mixture.checkin_orders`: integers 2..256, then every
16th to 1024), not the core's ``DEFAULT_ORDERS``; ``DEFAULT_ORDERS`` here is its former name (the same array).
"""

from secagg_dp.accounting.checkin.baselines import *  # noqa: F403
from secagg_dp.accounting.checkin.baselines import __all__ as _baselines
from secagg_dp.accounting.checkin.bases import *  # noqa: F403
from secagg_dp.accounting.checkin.bases import __all__ as _bases
from secagg_dp.accounting.checkin.dropout import *  # noqa: F403
from secagg_dp.accounting.checkin.dropout import __all__ as _dropout
from secagg_dp.accounting.checkin.local_steps import *  # noqa: F403
from secagg_dp.accounting.checkin.local_steps import __all__ as _local_steps
from secagg_dp.accounting.checkin.mixture import *  # noqa: F403
from secagg_dp.accounting.checkin.mixture import __all__ as _mixture
from secagg_dp.accounting.checkin.observers import *  # noqa: F403
from secagg_dp.accounting.checkin.observers import __all__ as _observers
from secagg_dp.accounting.checkin.pld import *  # noqa: F403
from secagg_dp.accounting.checkin.pld import __all__ as _pld
from secagg_dp.accounting.checkin.providers import *  # noqa: F403
from secagg_dp.accounting.checkin.providers import __all__ as _providers
from secagg_dp.accounting.checkin.tails import *  # noqa: F403
from secagg_dp.accounting.checkin.tails import __all__ as _tails

__all__ = list(
    dict.fromkeys([*_mixture, *_bases, *_tails, *_dropout, *_local_steps, *_baselines, *_observers, *_pld, *_providers])
)
