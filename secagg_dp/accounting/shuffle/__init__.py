"""Shuffle-model accountants, built on :mod:`secagg_dp.accounting.core`.

Holds the shuffle Gaussian mechanism (:mod:`.gaussian`: exact lower-bound RDP for one neighbouring pair
and an upper bound), shuffled check-in with Gaussian reports (:mod:`.shuffled_checkin`) and generic
epsilon0-LDP randomizers under shuffling (:mod:`.ldp`), and the Gaussian bounds reported as the core's
``Certificate`` record (:mod:`.certificates`). It imports the core and the check-in binomial
kernels (:mod:`secagg_dp.accounting.checkin.tails`); nothing in core or check-in imports it. Each module
states its own neighbouring relation as ``NEIGHBOURING`` (not re-exported here, since they differ).
"""

from secagg_dp.accounting.shuffle.certificates import *  # noqa: F403
from secagg_dp.accounting.shuffle.certificates import __all__ as _certificates
from secagg_dp.accounting.shuffle.gaussian import *  # noqa: F403
from secagg_dp.accounting.shuffle.gaussian import __all__ as _gaussian
from secagg_dp.accounting.shuffle.ldp import *  # noqa: F403
from secagg_dp.accounting.shuffle.ldp import __all__ as _ldp
from secagg_dp.accounting.shuffle.shuffled_checkin import *  # noqa: F403
from secagg_dp.accounting.shuffle.shuffled_checkin import __all__ as _shuffled_checkin

del NEIGHBOURING  # noqa: F821 -- per-module relation, see the module docstring
__all__ = [
    name for name in dict.fromkeys([*_gaussian, *_shuffled_checkin, *_ldp, *_certificates]) if name != "NEIGHBOURING"
]
