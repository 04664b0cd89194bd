"""Every valid stage transition of both roles, and every invalid (stage, message kind) pair refused."""

import numpy as np
import pytest

from protocols import messages as m
from protocols.client import SecAggClient
from protocols.round import _seeded
from protocols.server import SecAggServer
from protocols.stages import CLIENT_TRANSITIONS, SERVER_ACCEPTS, ClientStage, ServerStage
from secagg_dp.errors import AbortError, ProtocolError

C0, IDS, BITS, DIM, T, SEED = 3, (1, 2, 3, 4), 10, 3, 3, 11
SERVER_ORDER = [ServerStage.COLLECT_KEYS, ServerStage.COLLECT_SHARES, ServerStage.COLLECT_MASKED, ServerStage.COLLECT_UNMASK]
CLIENT_AT = {
    ServerStage.IDLE: ClientStage.IDLE,
    ServerStage.COLLECT_KEYS: ClientStage.KEYS_ADVERTISED,
    ServerStage.COLLECT_SHARES: ClientStage.SHARES_SENT,
    ServerStage.COLLECT_MASKED: ClientStage.MASKED_INPUT_SENT,
    ServerStage.COLLECT_UNMASK: ClientStage.DONE,
}


def play(target: ServerStage, *, hold_c0: bool = False):
    """Drive a seeded 4-client round until the server is in ``target``; returns (server, clients, messages).
    Same seed, same bytes: ``messages`` maps each kind to the copy sent to or by client C0."""
    round_id, csrc, ssrc = _seeded(SEED)
    server = SecAggServer(bits=BITS, dim=DIM, threshold=T, round_id=round_id, source=ssrc)
    clients = {c: SecAggClient(c, np.full(DIM, c, dtype=np.uint64), bits=BITS, source=csrc(c)) for c in IDS}
    msgs: dict[m.Kind, bytes] = {}
    if target is ServerStage.IDLE:
        return server, clients, msgs
    down = [(m.BROADCAST, server.open_round())]
    for stage in SERVER_ORDER:
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
            server.receive(out)
        if stage is target:
            return server, clients, msgs
        down = server.advance()  # after COLLECT_UNMASK this finishes the round (DONE)
    return server, clients, msgs


REF = play(ServerStage.DONE)[2]


def test_reference_round_completes():
    server, _, msgs = play(ServerStage.DONE)
    assert server.stage is ServerStage.DONE and set(msgs) == set(m.Kind)
    assert server.outcome.aggregate.tolist() == [sum(IDS) % (1 << BITS)] * DIM


@pytest.mark.parametrize("kind", list(m.Kind))
@pytest.mark.parametrize("server_stage", list(CLIENT_AT))
def test_client_stage_kind_pair(server_stage, kind):
    _, clients, _ = play(server_stage)
    client = clients[C0]
    before = client.stage
    assert before is CLIENT_AT[server_stage]
    if (before, kind) in CLIENT_TRANSITIONS:
        reply = client.receive(REF[kind])
        assert client.stage in CLIENT_TRANSITIONS[(before, kind)] and client.stage is not before
        assert reply is not None and m.peek_kind(reply) is not None
    else:
        with pytest.raises(ProtocolError):
            client.receive(REF[kind])
        assert client.stage is before  # refused without any state change


@pytest.mark.parametrize("kind", list(m.Kind))
def test_declined_client_refuses_everything(kind):
    round_id, csrc, _ = _seeded(SEED)
    client = SecAggClient(C0, np.zeros(DIM, dtype=np.uint64), bits=BITS, source=csrc(C0))
    open0 = m.RoundOpen(round_id, m.SERVER, m.BROADCAST, 0.0, BITS, DIM, T, 0).to_bytes()
    assert client.decide_check_in(open0) is None and client.stage is ClientStage.DECLINED
    with pytest.raises(ProtocolError):
        client.receive(REF[kind])
    assert client.stage is ClientStage.DECLINED


@pytest.mark.parametrize("kind", list(m.Kind))
@pytest.mark.parametrize("stage", [ServerStage.IDLE, *SERVER_ORDER, ServerStage.DONE])
def test_server_stage_kind_pair(stage, kind):
    server, _, _ = play(stage, hold_c0=True)
    assert server.stage is stage
    if SERVER_ACCEPTS.get(stage) is kind:
        server.receive(REF[kind])
        with pytest.raises(ProtocolError, match="duplicate"):
            server.receive(REF[kind])
    else:
        with pytest.raises(ProtocolError):
            server.receive(REF[kind])
    assert server.stage is stage


def test_server_deadline_transitions():
    server, _, _ = play(ServerStage.IDLE)
    with pytest.raises(ProtocolError):
        server.advance()  # nothing to close before the round is open
    server.open_round()
    with pytest.raises(ProtocolError):
        server.open_round()
    done, _, _ = play(ServerStage.DONE)
    with pytest.raises(ProtocolError):
        done.advance()


@pytest.mark.parametrize("kind", list(m.Kind))
def test_aborted_server_refuses_everything(kind):
    lonely = SecAggServer(bits=BITS, dim=DIM, threshold=T, round_id=_seeded(SEED)[0])
    lonely.open_round()
    with pytest.raises(AbortError):
        lonely.advance()
    assert lonely.stage is ServerStage.ABORTED and lonely.reconstructions == 0
    with pytest.raises(ProtocolError):
        lonely.receive(REF[kind])
    with pytest.raises(ProtocolError):
        lonely.advance()
