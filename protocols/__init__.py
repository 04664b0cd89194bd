"""Protocol parties (client and server state machines, messages, rounds), built on secagg_dp.

Entry point: :func:`run_secagg_round`. Lower level: :class:`SecAggServer` (``open_round``/``receive``/
``advance``), :class:`SecAggClient` (``decide_check_in``/``receive``), :class:`InProcessTransport` with a
:class:`FaultInjector`, and :func:`drive_round`.
"""

from protocols.client import SecAggClient
from protocols.graph import neighbourhoods, secaggplus_parameters
from protocols.round import STAGES, SecAggResult, drive_round, run_secagg_round
from protocols.server import RoundOutcome, SecAggServer
from protocols.stages import ClientStage, ServerStage
from protocols.transport import Envelope, FaultInjector, InProcessTransport

__all__ = [
    "run_secagg_round",
    "SecAggResult",
    "STAGES",
    "drive_round",
    "SecAggClient",
    "SecAggServer",
    "RoundOutcome",
    "ClientStage",
    "ServerStage",
    "Envelope",
    "FaultInjector",
    "InProcessTransport",
    "neighbourhoods",
    "secaggplus_parameters",
]
