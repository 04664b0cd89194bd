"""Bytes on the wire: the transport's counters against the sizes of the messages actually sent.

The expected figures are computed here from the transport's message log, independently of the meter: each
logged payload is decoded and re-encoded (so it is exactly one encoded message, and its size is that of
the message the protocol defines), and a broadcast is charged to the clients it is addressed to by reading
the message itself (the key roster lists its members; the round opening goes to the clients that answer).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from protocols import messages as m
from protocols import run_secagg_round
from protocols.communication import Communication, CommunicationMeter
from protocols.round import drive_round
from protocols.transport import Envelope, FaultInjector, InProcessTransport
from secagg_dp.errors import ProtocolError
from tests.protocols.roundkit import make_round


def _env(sender, recipient, size, fill=b"x"):
    return Envelope(sender, recipient, fill * size)


def test_meter_adds_sizes_per_client_stage_and_direction():
    t = InProcessTransport(rng=np.random.default_rng(0))
    t.deliver("advertise_keys:down", [_env(m.SERVER, m.BROADCAST, 50)])
    t.deliver("advertise_keys:up", [_env(1, m.SERVER, 10), _env(2, m.SERVER, 11)])  # client 3 declines
    t.deliver("share_keys:down", [_env(m.SERVER, m.BROADCAST, 100)])
    t.deliver("share_keys:up", [_env(1, m.SERVER, 7)])  # client 2 goes silent
    t.deliver("masked_input:down", [_env(m.SERVER, 1, 5), _env(m.SERVER, 2, 6), _env(m.SERVER, 1, 4)])
    c = t.communication()
    assert c.stages == ("advertise_keys", "share_keys", "masked_input")
    assert c.clients.tolist() == [1, 2]  # client 3 sent nothing: not a participant
    assert c.of(1) == {
        "upload": {"advertise_keys": 10, "share_keys": 7, "masked_input": 0},
        "download": {"advertise_keys": 50, "share_keys": 100, "masked_input": 9},
    }
    assert c.of(2) == {
        "upload": {"advertise_keys": 11, "share_keys": 0, "masked_input": 0},
        "download": {"advertise_keys": 50, "share_keys": 100, "masked_input": 6},
    }
    s = c.summary()
    assert (s["upload_bytes_mean"], s["upload_bytes_max"]) == (14.0, 17)
    assert (s["download_bytes_mean"], s["download_bytes_max"]) == (157.5, 159)
    assert s["stages"]["masked_input"]["download_bytes_mean"] == 7.5
    with pytest.raises(ProtocolError, match="client 3"):
        c.of(3)


def test_broadcast_goes_to_the_previous_stage_senders_only():
    meter = CommunicationMeter()
    meter.count("advertise_keys:down", [_env(m.SERVER, m.BROADCAST, 3)])
    meter.count("advertise_keys:up", [_env(c, m.SERVER, 1) for c in (4, 5, 6)])
    meter.count("share_keys:down", [_env(m.SERVER, m.BROADCAST, 20)])
    meter.count("share_keys:up", [_env(c, m.SERVER, 1) for c in (4, 5)])
    meter.count("masked_input:down", [_env(m.SERVER, m.BROADCAST, 300)])  # reaches 4 and 5, not 6
    meter.count("masked_input:up", [_env(4, m.SERVER, 1)])
    c = meter.result()
    assert c.download_bytes.tolist() == [323, 323, 23]
    assert c.upload_bytes.tolist() == [3, 2, 1]


def test_meter_counts_what_was_sent_not_what_faults_delivered():
    faults = FaultInjector().drop(sender=2).delay(sender=3).inject("advertise_keys:up", _env(9, m.SERVER, 1000))
    t = InProcessTransport(rng=np.random.default_rng(0), faults=faults)
    out = t.deliver("advertise_keys:up", [_env(c, m.SERVER, 10 * c) for c in (1, 2, 3)])
    assert sorted(e.sender for e in out) == [1, 9]  # 2 dropped, 3 held back, 9 injected by the adversary
    t.deliver("share_keys:up", [])  # client 3's envelope arrives now; it was counted when sent
    c = t.communication()
    assert c.clients.tolist() == [1, 2, 3]  # the injected replay is nobody's upload
    assert c.upload_bytes.tolist() == [10, 20, 30]


def test_meter_is_compact_and_refuses_unknown_phases():
    meter = CommunicationMeter()
    with pytest.raises(ProtocolError, match="phase"):
        meter.count("gossip:up", [])
    meter.count("masked_input:up", [_env(c, m.SERVER, 2) for c in range(5000)])
    meter.count("masked_input:up", [_env(c, m.SERVER, 3) for c in range(5000)])
    assert meter._up.nbytes <= 2 * 5000 * 5 * 8  # one row of per-stage counts per client, no envelopes kept
    assert meter.result().upload_bytes.tolist() == [5] * 5000
    with pytest.raises(ProtocolError, match="shape"):
        Communication(("share_keys",), np.arange(2), np.zeros((2, 2), np.int64), np.zeros((2, 1), np.int64))


def _expected_from_log(log):
    """Per client: {direction: {stage: bytes}} from a transport log, by decoding and re-encoding every message."""
    exp = {"upload": defaultdict(lambda: defaultdict(int)), "download": defaultdict(lambda: defaultdict(int))}
    answered = {e.sender for phase, e in log if phase == "advertise_keys:up"}
    for phase, env in log:
        stage, direction = phase.split(":")
        msg = m.decode(env.payload)
        wire = msg.to_bytes()
        assert wire == env.payload  # the payload is exactly one encoded message
        if direction == "up":
            assert msg.sender == env.sender and msg.recipient == m.SERVER
            exp["upload"][env.sender][stage] += len(wire)
        elif env.recipient != m.BROADCAST:
            exp["download"][env.recipient][stage] += len(wire)
        else:  # who the broadcast is for, read from the message itself
            members = msg.ids if isinstance(msg, m.KeyRoster) else sorted(answered)
            assert isinstance(msg, (m.KeyRoster, m.RoundOpen))
            for c in members:
                exp["download"][c][stage] += len(wire)
    return exp


@pytest.mark.parametrize(
    ("security", "neighbours", "t", "silent"),
    [
        ("active", None, 5, {}),
        ("active", 4, 3, {3: "masked_input", 6: "unmasking"}),
        ("semi-honest", None, 3, {2: "share_keys", 5: "masked_input"}),
        ("semi-honest", 2, 2, {4: "advertise_keys", 7: "consistency"}),
    ],
)
def test_round_counters_match_the_encoded_messages(security, neighbours, t, silent):
    server, clients, inputs, _ = make_round(seed=3, t=t, neighbours=neighbours, security=security)
    transport = InProcessTransport(rng=np.random.default_rng(5), keep_log=True)
    res = drive_round(server, clients, transport, silent_from=silent)
    comm = res.communication
    exp = _expected_from_log(transport.log)
    senders = sorted(exp["upload"])
    assert comm.clients.tolist() == senders == sorted(c for c in clients if silent.get(c) != "advertise_keys")
    stages = ["advertise_keys", "share_keys", "masked_input", "consistency", "unmasking"]
    assert list(comm.stages) == [s for s in stages if security == "active" or s != "consistency"]
    for c in senders:
        got = comm.of(c)
        for direction in ("upload", "download"):
            assert got[direction] == {s: exp[direction][c][s] for s in comm.stages}, (c, direction)
    # the masked input is d words of the modulus and more: never smaller than the raw vector
    assert all(comm.of(c)["upload"]["masked_input"] >= inputs[c].size * 16 // 8 for c in res.survivors)
    total_up = sum(len(e.payload) for phase, e in transport.log if phase.endswith(":up"))
    assert int(comm.upload_bytes.sum()) == total_up


def test_run_secagg_round_reports_communication_without_a_log():
    rng = np.random.default_rng(0)
    inputs = {c: rng.integers(0, 1 << 20, size=40, dtype=np.uint64) for c in range(12)}
    res = run_secagg_round(
        inputs, bits=20, threshold=4, neighbours=6, dropouts={"share_keys": {3}}, seed=2, round_id=bytes(16)
    )
    comm = res.communication
    assert comm.clients.tolist() == list(range(12))
    assert comm.of(3)["upload"]["share_keys"] == 0 and comm.of(3)["upload"]["advertise_keys"] > 0
    assert all(comm.of(c)["upload"]["masked_input"] > 0 for c in res.survivors)
    s = comm.summary()
    assert s["clients"] == 12 and s["upload_bytes_max"] == comm.upload_bytes.max() > s["upload_bytes_mean"]
