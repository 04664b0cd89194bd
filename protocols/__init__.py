"""Protocol parties (client and server state machines, messages, rounds), built on secagg_dp.

Entry point: :func:`run_secagg_round` (``security="active"`` by default, ``"semi-honest"`` for a trusted
server). Lower level: :class:`SecAggServer` (``open_round``/``receive(data, sender=...)``/``advance``),
:class:`SecAggClient` (``decide_check_in``/``receive``) configured by a :class:`ClientPolicy`, the identity
:class:`KeyRegistry` (:func:`create_identities`), :class:`InProcessTransport` with a :class:`FaultInjector`,
and :func:`drive_round`, which talks to the clients through a :class:`ClientPool` (:class:`InProcessClientPool`
here, its inputs a dict or :class:`LazyInputs` made one client at a time; :func:`run_pooled_round` runs a
round on any pool, e.g. the Dask one in ``simulations``; a round's configuration is one :class:`RoundPlan`,
checked and built by :func:`round_plan` and run by :func:`run_plan`). User guide
and threat model: docs/secure-aggregation.md.
"""

from protocols.client import SecAggClient
from protocols.communication import Communication
from protocols.graph import neighbourhoods, secaggplus_parameters
from protocols.pki import KeyRegistry, create_identities
from protocols.pool import ClientPool, InProcessClientPool, LazyInputs, RoundPlan
from protocols.round import STAGES, SecAggResult, drive_round, round_plan, run_plan, run_pooled_round, run_secagg_round
from protocols.security import SECURITY_MODES, ClientPolicy, min_threshold
from protocols.server import RoundOutcome, SecAggServer
from protocols.stages import ClientStage, ServerStage
from protocols.transport import Envelope, FaultInjector, InProcessTransport

__all__ = [
    "run_secagg_round",
    "SecAggResult",
    "Communication",
    "STAGES",
    "drive_round",
    "run_pooled_round",
    "round_plan",
    "run_plan",
    "RoundPlan",
    "ClientPool",
    "InProcessClientPool",
    "LazyInputs",
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
    "SECURITY_MODES",
    "ClientPolicy",
    "min_threshold",
    "KeyRegistry",
    "create_identities",
]
