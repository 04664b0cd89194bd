"""Stage enums and the explicit transition tables of the two roles."""

from __future__ import annotations

from enum import Enum

from protocols.messages import Kind
from secagg_dp.stages import PROTOCOL_STAGES

__all__ = ["ClientStage", "ServerStage", "CLIENT_TRANSITIONS", "SERVER_ACCEPTS", "SERVER_ADVANCE", "STAGE_NAMES"]


class ClientStage(Enum):
    IDLE = "idle"  # waiting for RoundOpen
    KEYS_ADVERTISED = "keys_advertised"  # checked in; waiting for the roster
    SHARES_SENT = "shares_sent"  # waiting for the bundle of boxes addressed to us
    MASKED_INPUT_SENT = "masked_input_sent"  # waiting for the survivor list (active) or the unmask request
    SURVIVORS_SIGNED = "survivors_signed"  # active mode: signed the survivor set; waiting for the unmask request
    DONE = "done"  # answered the one unmask request of the round
    DECLINED = "declined"  # own coin said no at check-in


class ServerStage(Enum):
    IDLE = "idle"
    COLLECT_KEYS = "collect_keys"
    COLLECT_SHARES = "collect_shares"
    COLLECT_MASKED = "collect_masked"
    COLLECT_SIGNATURES = "collect_signatures"  # active mode only: the consistency round
    COLLECT_UNMASK = "collect_unmask"
    DONE = "done"
    ABORTED = "aborted"


_COMMON: dict[tuple[ClientStage, Kind], tuple[ClientStage, ...]] = {
    (ClientStage.IDLE, Kind.ROUND_OPEN): (ClientStage.KEYS_ADVERTISED, ClientStage.DECLINED),
    (ClientStage.KEYS_ADVERTISED, Kind.KEY_ROSTER): (ClientStage.SHARES_SENT,),
    (ClientStage.SHARES_SENT, Kind.SHARE_BUNDLE): (ClientStage.MASKED_INPUT_SENT,),
}

# Per security mode: (client stage, message kind received) -> next stage; every other pair is refused.
# An active client never answers an unmask request before it has signed the survivor set.
CLIENT_TRANSITIONS: dict[str, dict[tuple[ClientStage, Kind], tuple[ClientStage, ...]]] = {
    "active": {
        **_COMMON,
        (ClientStage.MASKED_INPUT_SENT, Kind.SURVIVOR_LIST): (ClientStage.SURVIVORS_SIGNED,),
        (ClientStage.SURVIVORS_SIGNED, Kind.UNMASK_REQUEST): (ClientStage.DONE,),
    },
    "semi-honest": {
        **_COMMON,
        (ClientStage.MASKED_INPUT_SENT, Kind.UNMASK_REQUEST): (ClientStage.DONE,),
    },
}

# Message kind the server accepts in each stage (it stays in the stage until the deadline, `advance`).
SERVER_ACCEPTS: dict[ServerStage, Kind] = {
    ServerStage.COLLECT_KEYS: Kind.ADVERTISE_KEYS,
    ServerStage.COLLECT_SHARES: Kind.SHARE_KEYS,
    ServerStage.COLLECT_MASKED: Kind.MASKED_INPUT,
    ServerStage.COLLECT_SIGNATURES: Kind.SURVIVOR_SIGNATURE,
    ServerStage.COLLECT_UNMASK: Kind.UNMASK_RESPONSE,
}

# Deadline transitions (`open_round` for IDLE, `advance` otherwise) per security mode; any stage may
# also go to ABORTED. Only the active mode has the consistency round (COLLECT_SIGNATURES).
SERVER_ADVANCE: dict[str, dict[ServerStage, ServerStage]] = {
    "active": {
        ServerStage.IDLE: ServerStage.COLLECT_KEYS,
        ServerStage.COLLECT_KEYS: ServerStage.COLLECT_SHARES,
        ServerStage.COLLECT_SHARES: ServerStage.COLLECT_MASKED,
        ServerStage.COLLECT_MASKED: ServerStage.COLLECT_SIGNATURES,
        ServerStage.COLLECT_SIGNATURES: ServerStage.COLLECT_UNMASK,
        ServerStage.COLLECT_UNMASK: ServerStage.DONE,
    },
    "semi-honest": {
        ServerStage.IDLE: ServerStage.COLLECT_KEYS,
        ServerStage.COLLECT_KEYS: ServerStage.COLLECT_SHARES,
        ServerStage.COLLECT_SHARES: ServerStage.COLLECT_MASKED,
        ServerStage.COLLECT_MASKED: ServerStage.COLLECT_UNMASK,
        ServerStage.COLLECT_UNMASK: ServerStage.DONE,
    },
}

# Public stage names of run_secagg_round's `dropouts`, mapped to the server stage collecting that message.
# The names and their order are secagg_dp.stages.PROTOCOL_STAGES (the accountant's dropout model reads them there).
STAGE_NAMES: dict[str, ServerStage] = dict(
    zip(
        PROTOCOL_STAGES,
        (
            ServerStage.COLLECT_KEYS,
            ServerStage.COLLECT_SHARES,
            ServerStage.COLLECT_MASKED,
            ServerStage.COLLECT_SIGNATURES,  # skipped in semi-honest mode
            ServerStage.COLLECT_UNMASK,
        ),
        strict=True,
    )
)
