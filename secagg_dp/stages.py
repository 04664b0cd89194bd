"""The stages of one secure-aggregation round, and which of them lose a dropped client's noise.

The one definition of the stage model: the protocol (``protocols``) runs these stages in this order, the
simulator draws its dropouts over them, and the check-in accountant's dropout model counts the stages at which
a dropped client takes its noise with it.

Bonawitz et al. 2017 (Sec. 4 and 6): a client that stops responding before its masked input reaches the server
contributes neither data nor noise, exactly as if it had not checked in; from the masked input on, its mask is
removed with the survivors' shares and its input (and noise) stay in the sum. So a per-stage dropout rate p'
thins the check-in rate only over :data:`NOISE_LOST_STAGES` (see
:func:`secagg_dp.accounting.checkin.dropout.effective_checkin_rate`).
"""

from __future__ import annotations

__all__ = [
    "PROTOCOL_STAGES",
    "ACTIVE_ONLY_STAGES",
    "NOISE_LOST_STAGES",
    "INPUT_STAGE",
    "ROSTER_STAGE",
    "ROSTER_LOST_STAGES",
    "DROPOUT_STAGES",
    "PROTOCOL_DROPOUT_STAGES",
    "ROSTER_DROPOUT_STAGES",
    "stages_for",
]

#: Every stage of a round, in order; ``"consistency"`` (the signed survivor list) runs in active mode only.
PROTOCOL_STAGES: tuple[str, ...] = ("advertise_keys", "share_keys", "masked_input", "consistency", "unmasking")

#: Stages run only against an active (malicious) server.
ACTIVE_ONLY_STAGES: frozenset[str] = frozenset({"consistency"})

#: The stage whose message carries the client's masked input (data plus its share of the noise).
INPUT_STAGE = "masked_input"

#: Stages at which a client that stops responding is left out of the sum with its noise: every stage up to and
#: including the one that would deliver its masked input.
NOISE_LOST_STAGES: tuple[str, ...] = PROTOCOL_STAGES[: PROTOCOL_STAGES.index(INPUT_STAGE) + 1]


def stages_for(security: str) -> tuple[str, ...]:
    """The stages a round runs in ``security`` mode: all of them when ``"active"``, else without the
    active-only ones."""
    if security == "active":
        return PROTOCOL_STAGES
    return tuple(s for s in PROTOCOL_STAGES if s not in ACTIVE_ONLY_STAGES)


#: The stage whose messages fix the roster: the clients that advertised keys form the key roster the clients
#: receive at share_keys (its size N is what add-then-remove noise is scheduled for).
ROSTER_STAGE = "advertise_keys"

#: Stages at which a client that stops responding is left out of the roster: up to and including
#: :data:`ROSTER_STAGE` (so P(in the roster) = p (1 - p')^len(ROSTER_LOST_STAGES), one stage).
ROSTER_LOST_STAGES: tuple[str, ...] = PROTOCOL_STAGES[: PROTOCOL_STAGES.index(ROSTER_STAGE) + 1]

#: The stages the simulator draws one dropout coin for, in order: every stage but the active-only consistency
#: stage, which it does not draw (a client silent there has already sent its masked input, so it is in the sum
#: like one silent at unmasking; the random stream is that of these 4 stages).
DROPOUT_STAGES: tuple[str, ...] = stages_for("semi-honest")

#: How many stages can lose a dropped client's noise (advertise_keys, share_keys, masked_input): the exponent
#: of gamma = p (1 - p')^3 (:func:`secagg_dp.accounting.checkin.dropout.effective_checkin_rate`).
PROTOCOL_DROPOUT_STAGES = len(NOISE_LOST_STAGES)

#: How many stages can keep a client out of the roster (advertise_keys): roster rate p (1 - p').
ROSTER_DROPOUT_STAGES = len(ROSTER_LOST_STAGES)
