"""The identity-key registry: append-only bindings, verification against registered keys only."""

import pytest

from protocols.pki import KeyRegistry, advertise_statement, create_identities, survivor_statement
from secagg_dp.crypto import signing
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AuthenticationError, ParameterError

REG, IDS = create_identities([3, 5, 8], lambda c: SeededRandom(bytes([c]) * 32))


def test_registry_verifies_each_clients_own_signatures_only():
    body = advertise_statement(b"r" * 16, 5, b"\x01" * 32, b"\x02" * 32)
    sig = IDS[5].sign(signing.LABEL_ADVERTISE_KEYS, body)
    REG.verify(5, signing.LABEL_ADVERTISE_KEYS, body, sig)
    with pytest.raises(AuthenticationError):
        REG.verify(3, signing.LABEL_ADVERTISE_KEYS, body, sig)  # client 5's signature is not client 3's
    with pytest.raises(AuthenticationError):
        REG.verify(9, signing.LABEL_ADVERTISE_KEYS, body, sig)  # unregistered client


def test_registry_is_append_only():
    reg = KeyRegistry({3: IDS[3].public})
    reg.register(3, IDS[3].public)  # idempotent
    with pytest.raises(ParameterError, match="already registered"):
        reg.register(3, IDS[5].public)
    assert reg.public_key(3) == IDS[3].public and len(reg) == 1
    with pytest.raises(TypeError):
        reg.keys[4] = IDS[5].public  # read-only view


def test_statements_bind_round_and_set():
    assert advertise_statement(b"r" * 16, 5, b"\x01" * 32, b"\x02" * 32) != advertise_statement(
        b"s" * 16, 5, b"\x01" * 32, b"\x02" * 32
    )
    assert survivor_statement(b"r" * 16, [1, 2, 3]) == survivor_statement(b"r" * 16, [3, 1, 2])  # a set
    assert survivor_statement(b"r" * 16, [1, 2, 3]) != survivor_statement(b"r" * 16, [1, 2])


def test_remembered_verifications_never_accept_what_a_fresh_check_would_refuse():
    reg, ids = create_identities([3, 5], lambda c: SeededRandom(bytes([c + 40]) * 32))
    body = survivor_statement(b"r" * 16, [3, 5])
    sig = ids[5].sign(signing.LABEL_SURVIVOR_SET, body)
    for _ in range(2):  # the second call is answered from the memo
        reg.verify(5, signing.LABEL_SURVIVOR_SET, body, sig)
    other = survivor_statement(b"r" * 16, [5])
    bad = bytes([sig[0] ^ 1]) + sig[1:]
    refused = [
        (3, signing.LABEL_SURVIVOR_SET, body, sig),  # another signer
        (5, signing.LABEL_SURVIVOR_SET, other, sig),  # another statement
        (5, signing.LABEL_ADVERTISE_KEYS, body, sig),  # another label
        (5, signing.LABEL_SURVIVOR_SET, body, bad),  # a corrupted signature
    ]
    for _ in range(2):  # a failure is not remembered either way
        for args in refused:
            with pytest.raises(AuthenticationError):
                reg.verify(*args)
    assert (5, signing.LABEL_SURVIVOR_SET, body, sig) in reg._verified and len(reg._verified) == 1


@pytest.mark.parametrize("ids", [(), (7,), (5, 3, 8), tuple(range(0, 3000, 7)), (0, 0xFFFFFFFF)])
def test_survivor_statement_matches_its_definition(ids):
    # Oracle: the definition written out with struct and hashlib (round id, count, SHA-256 of sorted uint32s).
    import hashlib
    import struct

    s = sorted(ids)
    want = b"r" * 16 + struct.pack(">I", len(s)) + hashlib.sha256(struct.pack(f">{len(s)}I", *s)).digest()
    assert survivor_statement(b"r" * 16, ids) == want
    assert survivor_statement(b"r" * 16, list(reversed(ids))) == want


def test_holders_statements_batch_matches_the_definition():
    import hashlib
    import struct

    import numpy as np

    from protocols.pki import holders_statement, holders_statements

    rng = np.random.default_rng(5)
    owners = [3, 70000, 12]
    rows = rng.integers(0, 2**32, size=(3, 9), dtype=np.int64)  # unsorted rows: sorted by both functions
    got = holders_statements(b"r" * 16, owners, rows)
    for owner, row, stated in zip(owners, rows, got, strict=True):
        oracle = b"secagg-dp/v3/holders\x00" + b"r" * 16 + struct.pack(">I", owner)
        oracle += b"".join(struct.pack(">I", int(v)) for v in sorted(row.tolist()))
        assert stated == hashlib.sha256(oracle).digest() == holders_statement(b"r" * 16, owner, row)
