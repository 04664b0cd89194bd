"""The two seams of the protocol state machines: the add-then-remove collaborator (protocols/enforcement.py)
and the signed statements (protocols/statements.py). Each hook is checked on its own against an independent
oracle: the schedule's boundaries as documented (docs/noise-enforcement.md, N = 12, tau = 0.25: D = 3,
boundaries 0, 1, 2, 3), the noise a client keeps regenerated with ``client_noise(keep=...)``, and Ed25519
verification called with the label spelled out."""

from __future__ import annotations

import numpy as np
import pytest

from protocols import enforcement as enf
from protocols import graph, pki, statements
from protocols import messages as m
from secagg_dp.crypto import signing
from secagg_dp.crypto.randomness import SeededRandom
from secagg_dp.errors import AuthenticationError, ParameterError, ProtocolError
from secagg_dp.noise.add_then_remove import NoiseSpec, client_noise, level_seeds
from secagg_dp.zq import add_mod, wrap_int64

SPEC, N, BITS, DIM = NoiseSpec(300.0, 0.25), 12, 20, 9


def _client(n: int = N) -> enf.ClientEnforcement:
    c = enf.ClientEnforcement.of(SPEC, bytes(range(32)))
    assert c is not None
    c.on_roster(n)
    assert c.schedule is not None and c.schedule.boundaries == (0, 1, 2, 3)  # the documented schedule
    return c


def _ask(c: enf.ClientEnforcement | None, g: int, *, active: bool = False, full: bool = True, listed: int = N) -> int:
    return enf.requested_group(
        c, 7, g, active=active, full=full, roster=N, signed=listed, listed=listed, phantoms=lambda: set()
    )


def test_no_collaborator_without_a_spec_and_bad_arguments_are_refused() -> None:
    assert enf.ClientEnforcement.of(None, None) is None and enf.ServerEnforcement.of(None) is None
    with pytest.raises(TypeError, match="noise"):
        enf.ServerEnforcement.of(0.5)  # type: ignore[arg-type]
    with pytest.raises(ParameterError, match="noise_master"):
        enf.ClientEnforcement.of(None, b"short")


@pytest.mark.parametrize(("dropped", "g", "ok"), [(2, 3, True), (2, 2, False), (0, 1, True), (1, 1, False)])
def test_requested_group_is_allowed_only_above_the_dropout_count(dropped: int, g: int, ok: bool) -> None:
    """Group g may be removed iff b_{g-1} >= d (boundaries 0, 1, 2, 3): d = 2 allows group 3 only."""
    c = _client()
    if ok:
        assert _ask(c, g, listed=N - dropped) == g
    else:
        with pytest.raises(ProtocolError, match=f"refusing to reveal noise group {g}: with d = {dropped}"):
            _ask(c, g, listed=N - dropped)


def test_requested_group_refusals_without_noise_beyond_tolerance_and_with_phantoms() -> None:
    assert _ask(None, 0) == 0
    with pytest.raises(ProtocolError, match="which we did not add"):
        _ask(None, 1)
    with pytest.raises(ProtocolError, match="which we did not add"):
        _ask(_client(), 4)  # G = 3
    with pytest.raises(ProtocolError, match=r"only groups \(none\)"):
        _ask(_client(), 3, listed=N - 4)  # d = 4 > D = 3
    c = _client()
    with pytest.raises(ProtocolError, match="counts client 5, which never shared"):
        enf.requested_group(c, 7, 3, active=True, full=True, roster=N, signed=N, listed=N, phantoms=lambda: {9, 5})
    # semi-honest SecAgg+ trusts the server's d (a trusted server): any group it added
    assert _ask(c, 1, full=False, listed=1) == 1


def test_share_boxes_tails_and_reveal_round_trip() -> None:
    """The tails appended to the boxes parse back (read_tails) to the shares revealed for the asked group."""
    c = _client()
    plain = [bytes(m.SharePlaintext.LEN)] * 4
    boxed, commit = c.share_boxes(
        plain, [1, 2, 3, 4], 2, threshold=3, round_id=b"r" * 16, owner=7, source=SeededRandom(b"k" * 32)
    )
    assert len(commit) == 32 and c.tail == enf.box_tail(c) == 4 * m.NOISE_PIECES * 3
    tails = [b[m.SharePlaintext.LEN :] for b in boxed]
    assert all(len(t) == c.tail for t in tails) and all(b.startswith(p) for b, p in zip(boxed, plain, strict=True))
    ok = np.ones(4, dtype=bool)
    rows = enf.read_tails(c, tails, ok)
    assert ok.all() and all(r.shape == (3, m.NOISE_PIECES) for r in rows)
    owners, out = c.reveal(7, 2, [(11, rows[0]), (12, rows[1])])
    assert owners == [7, 11, 12]
    assert np.array_equal(out[0], rows[2][1]) and np.array_equal(out[1], rows[0][1])  # our own row is ``mine``
    with pytest.raises(ProtocolError, match="no noise-seed shares"):
        c.reveal(7, 2, [])  # forgotten once revealed


def test_tails_are_refused_when_malformed_or_unexpected() -> None:
    ok = np.ones(2, dtype=bool)
    enf.read_tails(None, [b"", b"x"], ok)  # without enforcement a box carries no tail
    assert ok.tolist() == [True, False]
    c = _client()
    c.tail = 4 * m.NOISE_PIECES * 3
    big = (np.full(3 * m.NOISE_PIECES, 65537, dtype=">u4")).tobytes()  # outside GF(65537)
    ok = np.ones(2, dtype=bool)
    enf.read_tails(c, [big, big[:-4]], ok)
    assert ok.tolist() == [False, False]


def test_server_checks_commitments_and_unasked_noise_shares() -> None:
    enf.check_commitment(None, 3, b"")
    with pytest.raises(ProtocolError, match="noise commitment"):
        enf.check_commitment(None, 3, b"c" * 32)
    s = enf.ServerEnforcement(SPEC)
    s.on_roster(N)
    with pytest.raises(ProtocolError, match="noise commitment"):
        enf.check_commitment(s, 3, b"")
    with pytest.raises(ProtocolError, match="not asked for"):
        enf.check_noise_owners(s, 3, (4,))
    assert s.choose_group(2) == 3 and enf.asked_group(s) == 3  # d = 2: group 3 only
    enf.check_noise_owners(s, 3, (4,))
    assert s.short(lambda u: {1: 2, 2: 3}[u], [1, 2], 3) == [1]


def test_removal_leaves_exactly_the_kept_groups() -> None:
    """x + z(all groups) with the survivor's groups g..G removed equals x + z(level 0 and groups < g), the
    latter computed by ``client_noise(keep=...)`` (each group from its own seed, not through the chain)."""
    master = bytes(range(32))
    c, s = _client(), enf.ServerEnforcement(SPEC)
    s.on_roster(N)
    boxed, commit = c.share_boxes(
        [b""] * 3, [1, 2, 3], 0, threshold=2, round_id=b"r" * 16, owner=7, source=SeededRandom(b"k" * 32)
    )
    s.record_commitment(7, commit)
    x = np.arange(DIM, dtype=np.uint64)
    y = np.concatenate(list(c.add_noise([x[:4], x[4:]], DIM, BITS)))
    group = s.choose_group(1)  # d = 1: groups 2 and 3
    seed = level_seeds(master, 3)[group]
    assert s.reconstruct([7], b"r" * 16, lambda owners, verify: {u: seed for u in owners if verify(u, seed)}) == 1
    total, removed = s.remove(y, DIM, BITS)
    assert removed == (2, 3)
    kept = client_noise(SPEC.schedule(N), master, DIM, keep=(1,))
    assert np.array_equal(total, add_mod(x, wrap_int64(kept, BITS), BITS))


def test_a_seed_that_does_not_open_the_commitment_is_not_accepted() -> None:
    s = enf.ServerEnforcement(SPEC)
    s.on_roster(N)
    s.record_commitment(7, b"\x00" * 32)
    s.choose_group(0)
    accepted: list[bool] = []

    def reconstruct(owners: list[int], verify) -> dict[int, bytes]:
        accepted.append(verify(7, b"s" * 16))
        return {}

    assert s.reconstruct([7], b"r" * 16, reconstruct) == 0
    assert accepted == [False]


def test_old_import_paths_name_the_same_statements() -> None:
    for name in ("advertise_statement", "consistency_statement", "survivor_statement", "holders_statement"):
        assert getattr(pki, name) is getattr(statements, name)
    assert graph.roster_statement is statements.roster_statement


def test_signing_helpers_bind_each_statement_to_its_label() -> None:
    key = signing.generate_signing_key(source=SeededRandom(b"i" * 32))
    reg = pki.KeyRegistry({4: key.public})
    rid, enc, mask = b"r" * 16, b"\x01" * 32, b"\x02" * 32
    sig = statements.sign_keys(key, rid, 4, enc, mask)
    signing.verify(key.public, signing.LABEL_ADVERTISE_KEYS, statements.advertise_statement(rid, 4, enc, mask), sig)
    statements.verify_keys(reg, rid, 4, enc, mask, sig)
    body = statements.consistency_statement(rid, b"a" * 32, b"b" * 32, 9)
    ssig = statements.sign_survivor_set(key, body)
    signing.verify(key.public, signing.LABEL_SURVIVOR_SET, body, ssig)
    statements.verify_survivor_set(reg, 4, body, ssig)
    with pytest.raises(AuthenticationError):  # a check-in signature is not a survivor-set signature
        statements.verify_survivor_set(reg, 4, statements.advertise_statement(rid, 4, enc, mask), sig)
    with pytest.raises(AuthenticationError):
        statements.verify_keys(reg, rid, 4, enc, b"\x03" * 32, sig)


def test_survivor_signature_docstring_names_the_signed_statement() -> None:
    doc = m.SurvivorSignature.__doc__ or ""
    assert "consistency_statement" in doc and "survivor_statement" not in doc
