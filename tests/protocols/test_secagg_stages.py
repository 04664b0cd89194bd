"""Every valid stage transition of both roles in both security modes, and every invalid (stage, message
kind) pair refused without a state change."""

import numpy as np
import pytest
from roundkit import make_round

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.pool import seeded_sources as _seeded
from protocols.security import ClientPolicy
from protocols.server import SecAggServer
from protocols.stages import CLIENT_TRANSITIONS, SERVER_ACCEPTS, SERVER_ADVANCE, ClientStage, ServerStage
from secagg_dp.errors import AbortError, ProtocolError

C0, IDS, BITS, DIM, T, SEED = 3, (1, 2, 3, 4), 10, 3, 3, 11
MODES = ("active", "semi-honest")
CLIENT_AFTER = {  # the client's stage once the server has entered a stage and C0 has answered
    ServerStage.IDLE: ClientStage.IDLE,
    ServerStage.COLLECT_KEYS: ClientStage.KEYS_ADVERTISED,
    ServerStage.COLLECT_SHARES: ClientStage.SHARES_SENT,
    ServerStage.COLLECT_MASKED: ClientStage.MASKED_INPUT_SENT,
    ServerStage.COLLECT_SIGNATURES: ClientStage.SURVIVORS_SIGNED,
    ServerStage.COLLECT_UNMASK: ClientStage.DONE,
}


def server_order(security):
    order, s = [], ServerStage.IDLE
    while s in SERVER_ADVANCE[security]:
        s = SERVER_ADVANCE[security][s]
        order.append(s)
    return order  # ends with DONE


def play(target: ServerStage, security: str, *, hold_c0: bool = False):
    """Drive a seeded 4-client round until the server is in ``target``; returns (server, clients, messages).
    Same seed, same bytes: ``messages`` maps each kind to the copy sent to or by client C0."""
    server, clients, _, _ = make_round(SEED, T, IDS, security=security, bits=BITS, dim=DIM)
    clients = {
        c: SecAggClient(
            c,
            np.full(DIM, c, dtype=np.uint64),
            bits=BITS,
            policy=clients[c].policy,
            identity=clients[c]._identity,
            registry=clients[c]._registry,
            source=_seeded(SEED)[1](c),
        )
        for c in IDS
    }
    msgs: dict[m.Kind, bytes] = {}
    if target is ServerStage.IDLE:
        return server, clients, msgs
    down = [(m.BROADCAST, server.open_round())]
    for stage in server_order(security):
        ups = {}
        for rcpt, b in down:
            for cid in IDS if rcpt == m.BROADCAST else [rcpt]:
                ups[cid] = clients[cid].receive(b)
                if cid == C0:
                    msgs[m.peek_kind(b)] = b
        for cid, out in sorted(ups.items()):
            if cid == C0:
                msgs[m.peek_kind(out)] = out
                if hold_c0 and stage is target:
                    continue
            server.receive(out, sender=cid)
        if stage is target:
            return server, clients, msgs
        down = server.advance()  # after COLLECT_UNMASK this finishes the round (DONE)
    return server, clients, msgs


REF = {mode: play(ServerStage.DONE, mode)[2] for mode in MODES}
STAGES_OF = [(mode, st) for mode in MODES for st in [ServerStage.IDLE, *server_order(mode)]]


@pytest.mark.parametrize("security", MODES)
def test_reference_round_completes(security):
    server, _, msgs = play(ServerStage.DONE, security)
    assert server.stage is ServerStage.DONE
    consistency = {m.Kind.SURVIVOR_LIST, m.Kind.SURVIVOR_SIGNATURE}
    assert set(msgs) == (set(m.Kind) if security == "active" else set(m.Kind) - consistency)
    assert server.outcome.aggregate.tolist() == [sum(IDS) % (1 << BITS)] * DIM


def _ref(kind):
    return REF["active"].get(kind) or REF["semi-honest"][kind]


@pytest.mark.parametrize("kind", list(m.Kind))
@pytest.mark.parametrize("security,server_stage", [p for p in STAGES_OF if p[1] is not ServerStage.DONE])
def test_client_stage_kind_pair(server_stage, kind, security):
    _, clients, _ = play(server_stage, security)
    client = clients[C0]
    before = client.stage
    assert before is CLIENT_AFTER[server_stage]
    table = CLIENT_TRANSITIONS[security]
    msg = REF[security].get(kind, _ref(kind))
    if (before, kind) in table:
        reply = client.receive(msg)
        assert client.stage in table[(before, kind)] and client.stage is not before
        assert reply is not None and m.peek_kind(reply) is not None
    else:
        with pytest.raises(ProtocolError):
            client.receive(msg)
        assert client.stage is before  # refused without any state change


@pytest.mark.parametrize("kind", list(m.Kind))
def test_declined_client_refuses_everything(kind):
    round_id, csrc, _, _ = _seeded(SEED)
    client = SecAggClient(
        C0, np.zeros(DIM, dtype=np.uint64), bits=BITS, policy=ClientPolicy(security="semi-honest"), source=csrc(C0)
    )
    open0 = m.RoundOpen(round_id, m.SERVER, m.BROADCAST, 0.0, BITS, DIM, T, 0, 0).to_bytes()
    assert client.decide_check_in(open0) is None and client.stage is ClientStage.DECLINED
    with pytest.raises(ProtocolError):
        client.receive(_ref(kind))
    assert client.stage is ClientStage.DECLINED


@pytest.mark.parametrize("kind", list(m.Kind))
@pytest.mark.parametrize("security,stage", STAGES_OF)
def test_server_stage_kind_pair(stage, kind, security):
    server, _, _ = play(stage, security, hold_c0=True)
    assert server.stage is stage
    msg = REF[security].get(kind, _ref(kind))
    if SERVER_ACCEPTS.get(stage) is kind:
        server.receive(msg, sender=C0)
        with pytest.raises(ProtocolError, match="duplicate"):
            server.receive(msg, sender=C0)
    else:
        with pytest.raises(ProtocolError):
            server.receive(msg, sender=C0)
    assert server.stage is stage


def test_active_client_never_unmasks_without_the_consistency_round():
    # The semi-honest transition (MASKED_INPUT_SENT, UNMASK_REQUEST) does not exist in active mode.
    assert (ClientStage.MASKED_INPUT_SENT, m.Kind.UNMASK_REQUEST) not in CLIENT_TRANSITIONS["active"]
    _, clients, _ = play(ServerStage.COLLECT_MASKED, "active")
    req = m.decode(REF["active"][m.Kind.UNMASK_REQUEST])
    with pytest.raises(ProtocolError, match="refuses"):
        clients[C0].receive(req.to_bytes())
    assert clients[C0].stage is ClientStage.MASKED_INPUT_SENT


@pytest.mark.parametrize("security", MODES)
def test_server_deadline_transitions(security):
    server, _, _ = play(ServerStage.IDLE, security)
    with pytest.raises(ProtocolError):
        server.advance()  # nothing to close before the round is open
    server.open_round()
    with pytest.raises(ProtocolError):
        server.open_round()
    done, _, _ = play(ServerStage.DONE, security)
    with pytest.raises(ProtocolError):
        done.advance()


@pytest.mark.parametrize("kind", list(m.Kind))
def test_aborted_server_refuses_everything(kind):
    lonely = SecAggServer(bits=BITS, dim=DIM, threshold=T, security="semi-honest", round_id=_seeded(SEED)[0])
    lonely.open_round()
    with pytest.raises(AbortError):
        lonely.advance()
    assert lonely.stage is ServerStage.ABORTED and lonely.reconstructions == 0
    with pytest.raises(ProtocolError):
        lonely.receive(_ref(kind), sender=C0)
    with pytest.raises(ProtocolError):
        lonely.advance()
