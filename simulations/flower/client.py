"""The client side of the Flower path: :func:`secagg_dp_mod`, a Flower Mod wrapping a ``ClientApp``'s ``train``.

Messages of our workflow carry a ConfigRecord ``"secagg-dp"`` with a ``"stage"``; any other message passes
through untouched. Stages:

* ``"identity"`` (active mode only): the node's Ed25519 identity key for the round's registry;
* ``"start"``: the Mod calls the wrapped ``train`` (``call_next``), takes the update as the flattened
  difference between the returned and the received ``ArrayRecord``, clips, encodes onto Z_q and adds discrete
  noise (:func:`~simulations.flower.core.encode_update`), and replies with nothing but an acknowledgement
  (the plain update and the train function's metrics never leave the node);
* a protocol stage (:data:`protocols.STAGES`): the downlink payloads of our masking protocol go to a
  :class:`protocols.SecAggClient`; the replies go back in order.

A Flower node keeps state between messages only in its ``Context.state`` records (bytes, numbers, strings), and a
:class:`~protocols.SecAggClient` holds parsed key objects that do not serialise. So the node keeps what
determines its client: the encoded input (packed), the round plan, the registry, a fresh 32-byte per-round
secret that seeds every key, nonce and Shamir coefficient of the client (AES-256-CTR,
:class:`secagg_dp.crypto.SeededRandom`; in a seeded simulation the plan's seed instead) and the downlink payloads
received so far. Each message rebuilds the client and replays the earlier payloads, which reproduces its state
bit for bit (every random choice comes from that secret), then handles the new ones. The replay repeats earlier
stages' work (about twice a round's client cost over the 4-5 stages).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from protocols import wire
from protocols.client import SecAggClient
from protocols.pki import KeyRegistry
from protocols.pool import RoundPlan
from protocols.security import ClientPolicy
from secagg_dp.crypto import signing
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import ParameterError, ProtocolError
from simulations.flower.core import (
    FlowerDPConfig,
    client_generator,
    encode_update,
    plan_from_record,
    unpack_registry,
)

__all__ = ["secagg_dp_mod", "make_secagg_dp_mod", "round_policy", "RECORD", "STATE", "flatten_arrays"]

RECORD = "secagg-dp"  # the ConfigRecord of our workflow's messages and replies
STATE = "secagg-dp.state"  # the node's state record (Context.state)
IDENTITY = "secagg-dp.identity"  # the node's long-term identity seed (Context.state), unseeded runs only


def flatten_arrays(arrays: Any) -> np.ndarray:
    """The arrays of a Flower ``ArrayRecord`` (in their order) as one float64 vector."""
    parts = [np.asarray(a) for a in arrays.to_numpy_ndarrays()]
    for a in parts:
        if a.dtype.kind not in "biuf":  # float64 conversion would drop a complex array's imaginary part
            raise ParameterError(f"The model's arrays must be real numbers, not dtype {a.dtype}.")
    parts = [a.astype(np.float64).reshape(-1) for a in parts]
    return np.concatenate(parts) if parts else np.zeros(0)


def _identity(ctx: Any, plan: RoundPlan, cid: int) -> signing.SigningKey:
    """The node's identity: from the plan's seed in a seeded simulation, else a long-term seed kept on the node."""
    if plan.seed is not None:
        return signing.generate_signing_key(source=plan.identity_source(cid))
    from flwr.app import ConfigRecord

    rec = ctx.state.config_records.get(IDENTITY)
    if rec is None:
        rec = ctx.state.config_records[IDENTITY] = ConfigRecord({"seed": os.urandom(32)})
    return signing.signing_key_from_seed(bytes(rec["seed"]))


def round_policy(plan: RoundPlan, pinned: FlowerDPConfig | None) -> ClientPolicy:
    """The policy this node's protocol client enforces in the round ``plan`` the server sent.

    Pinned: the node's own :meth:`FlowerDPConfig.client_policy` (its mode, minimum threshold, degree and
    ``min_roster``), after refusing (ProtocolError) a plan that :meth:`FlowerDPConfig.plan_refusal` finds unsafe.
    Unpinned: the plan's own policy, in semi-honest mode only: an active client whose threshold, degree and
    minimum roster come from the server it defends against has no guarantee, so it refuses (ProtocolError)."""
    if pinned is None:
        if plan.security != "semi-honest":
            raise ProtocolError(
                f"the server's round plan is in {plan.security!r} mode, whose threshold, degree and minimum "
                "roster a client must take from its own configuration: use make_secagg_dp_mod(pinned=cfg)"
            )
        return plan.policy
    why = pinned.plan_refusal(plan)
    if why is not None:
        raise ProtocolError(why)
    return pinned.client_policy()


def _plan(rec: Any) -> RoundPlan:
    return plan_from_record({k[5:]: v for k, v in rec.items() if k.startswith("plan.")})


def _client(ctx: Any, state: Any, pinned: FlowerDPConfig | None) -> tuple[SecAggClient, RoundPlan]:
    """Rebuild this round's client from the node state and replay the payloads it has already handled."""
    plan = _plan(state)
    policy = round_policy(plan, pinned)  # checked at "start" already; the state holds that plan
    cid = int(state["cid"])
    x = wire.unpack_residues(bytes(state["x"]), plan.dim, plan.bits)
    registry = identity = None
    if plan.security == "active":
        registry = KeyRegistry(unpack_registry(bytes(state["registry"])))
        identity = _identity(ctx, plan, cid)
    source = plan.client_source(cid) if plan.seed is not None else SeededRandom(bytes(state["secret"]))
    client = SecAggClient(cid, x, bits=plan.bits, policy=policy, identity=identity, registry=registry, source=source)
    for payload in state.get("log", []):
        try:
            client.receive(bytes(payload))
        except ProtocolError:
            pass  # refused the first time too: the client is unchanged by a refusal
    return client, plan


#: The fields a client can pin (:func:`make_secagg_dp_mod`): everything its privacy and the sum's security rest on.
PINNED = (
    "neighbours",
    "seed",
    "dim",
    "clip",
    "noise_multiplier",
    "sample_size",
    "population",
    "bits",
    "mechanism",
    "security",
    "k_stddevs",
    "beta",
)


def make_secagg_dp_mod(pinned: FlowerDPConfig | None = None) -> Any:
    """A Flower Mod like :func:`secagg_dp_mod` that refuses a round whose parameters differ from ``pinned`` in
    any of :data:`PINNED` or whose threshold or ``min_roster`` is lower, or whose round plan
    :meth:`FlowerDPConfig.plan_refusal` refuses (the reply is a Flower error, which the server counts as a
    dropout); its protocol client enforces ``pinned.client_policy()``, never the server's plan. Without
    ``pinned`` the client takes the server's parameters as they come (trusted server: semi-honest mode only)."""
    if pinned is not None and not isinstance(pinned, FlowerDPConfig):
        raise TypeError(f"Argument 'pinned' must be a FlowerDPConfig, not {type(pinned).__name__}.")

    def mod(msg: Any, ctx: Any, call_next: Any) -> Any:
        return _handle(msg, ctx, call_next, pinned)

    return mod


def secagg_dp_mod(msg: Any, ctx: Any, call_next: Any) -> Any:
    """Flower Mod: clip, encode onto Z_q, add discrete noise and run our masking protocol (module docstring).

    Use it as ``ClientApp(mods=[secagg_dp_mod])`` with a ``train`` function that returns the locally trained
    model as the first ``ArrayRecord`` of its reply, and :class:`~simulations.flower.SecAggDPWorkflow` on the
    server. It trusts the server's parameters, so it refuses an active-mode round (:func:`round_policy`);
    :func:`make_secagg_dp_mod` pins them."""
    return _handle(msg, ctx, call_next, None)


def _refusal(cfg: FlowerDPConfig, pinned: FlowerDPConfig) -> str | None:
    for name in PINNED:
        if getattr(cfg, name) != getattr(pinned, name):
            asked, own = getattr(cfg, name), getattr(pinned, name)
            return f"the server asked for {name} = {asked!r}; this client is pinned to {own!r}"
    if cfg.threshold < pinned.threshold:
        return f"the server asked for threshold {cfg.threshold} < the pinned {pinned.threshold}"
    if pinned.min_roster is not None and (cfg.min_roster is None or cfg.min_roster < pinned.min_roster):
        return f"the server asked for min_roster {cfg.min_roster} < the pinned {pinned.min_roster}"
    return None


def _handle(msg: Any, ctx: Any, call_next: Any, pinned: FlowerDPConfig | None) -> Any:
    from flwr.app import ConfigRecord, Error, Message, RecordDict

    if RECORD not in msg.content.config_records:
        return call_next(msg, ctx)
    rec = msg.content.config_records[RECORD]
    stage = str(rec["stage"])
    out: dict[str, Any] = {"stage": stage}
    if stage == "identity":
        plan = _plan(rec)
        try:
            round_policy(plan, pinned)  # before the identity key (a seeded plan would derive it)
        except ProtocolError as e:
            return Message(Error(code=0, reason=f"secagg-dp: {e}"), reply_to=msg)
        out["identity"] = _identity(ctx, plan, int(rec["cid"])).public
    elif stage == "start":
        cfg = FlowerDPConfig.from_record({k[4:]: v for k, v in rec.items() if k.startswith("cfg.")})
        why = None if pinned is None else _refusal(cfg, pinned)
        try:
            round_policy(_plan(rec), pinned)
        except ProtocolError as e:
            why = why or str(e)
        if why is not None:
            return Message(Error(code=0, reason=f"secagg-dp: {why}"), reply_to=msg)
        received = next(iter(msg.content.array_records.values()))
        before = flatten_arrays(received)
        reply = call_next(msg, ctx)
        if reply.has_error():
            return reply
        after = flatten_arrays(next(iter(reply.content.array_records.values())))
        key = int(ctx.node_config.get("partition-id", 0)) if cfg.seed is not None else 0
        enc = encode_update(cfg, after - before, client_generator(cfg.seed, int(rec["round"]), key))
        state: dict[str, Any] = {k: v for k, v in rec.items() if k.startswith("plan.")}
        state.update(
            cid=int(rec["cid"]),
            x=wire.pack_residues(enc, cfg.bits),
            registry=bytes(rec.get("registry", b"")),
            secret=os.urandom(32),
            log=[],
        )
        ctx.state.config_records[STATE] = ConfigRecord(state)
        out["ok"] = 1
    else:
        state = dict(ctx.state.config_records[STATE])
        client, _ = _client(ctx, state, pinned)
        payloads = [bytes(p) for p in rec["payloads"]]
        replies: list[bytes] = []
        replied: list[int] = []
        refused: list[str] = []
        refused_at: list[int] = []
        for pos, payload in zip(rec["positions"], payloads, strict=True):
            try:
                r = client.receive(payload)
            except ProtocolError as e:
                refused.append(f"{stage}: client {client.id} refused a message: {e}")
                refused_at.append(int(pos))
                continue
            if r is not None:
                replies.append(r)
                replied.append(int(pos))
        state["log"] = [*state.get("log", []), *payloads]
        ctx.state.config_records[STATE] = ConfigRecord(state)
        out.update(replies=replies, replied=replied, refused=refused, refused_at=refused_at)
    return Message(RecordDict({RECORD: ConfigRecord(out)}), reply_to=msg)
