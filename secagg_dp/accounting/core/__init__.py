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

from secagg_dp.accounting.core.accountant import *  # noqa: F403
from secagg_dp.accounting.core.accountant import __all__ as _accountant
from secagg_dp.accounting.core.calibration import *  # noqa: F403
from secagg_dp.accounting.core.calibration import __all__ as _calibration
from secagg_dp.accounting.core.conversion import *  # noqa: F403
from secagg_dp.accounting.core.conversion import __all__ as _conversion
from secagg_dp.accounting.core.events import *  # noqa: F403
from secagg_dp.accounting.core.events import __all__ as _events
from secagg_dp.accounting.core.interop import *  # noqa: F403
from secagg_dp.accounting.core.interop import __all__ as _interop
from secagg_dp.accounting.core.ledger import *  # noqa: F403
from secagg_dp.accounting.core.ledger import __all__ as _ledger
from secagg_dp.accounting.core.logspace import *  # noqa: F403
from secagg_dp.accounting.core.logspace import __all__ as _logspace
from secagg_dp.accounting.core.pairs import *  # noqa: F403
from secagg_dp.accounting.core.pairs import __all__ as _pairs
from secagg_dp.accounting.core.pld_accountant import *  # noqa: F403
from secagg_dp.accounting.core.pld_accountant import __all__ as _pld_accountant
from secagg_dp.accounting.core.rdp import *  # noqa: F403
from secagg_dp.accounting.core.rdp import __all__ as _rdp
from secagg_dp.accounting.core.rdp_accountant import *  # noqa: F403
from secagg_dp.accounting.core.rdp_accountant import __all__ as _rdp_accountant
from secagg_dp.accounting.core.subsampling import *  # noqa: F403
from secagg_dp.accounting.core.subsampling import __all__ as _subsampling

__all__ = list(
    dict.fromkeys(
        [
            *_events,
            *_rdp,
            *_subsampling,
            *_pairs,
            *_logspace,
            *_conversion,
            *_calibration,
            *_accountant,
            *_rdp_accountant,
            *_pld_accountant,
            *_interop,
            *_ledger,
        ]
    )
)
