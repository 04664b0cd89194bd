"""The signed statements of a round, in one place: what each party hashes or signs, and the label each
signature is bound to (Bonawitz et al. 2017, Sec. 6: signed keys and the consistency round).

* :func:`advertise_statement`: a client's per-round X25519 keys, signed at check-in (``LABEL_ADVERTISE_KEYS``;
  :func:`sign_keys`, :func:`verify_keys`).
* :func:`roster_statement`: the 32-byte digest naming one committed roster (its Merkle root and size); the
  SecAgg+ graph seed is derived from it (:func:`protocols.graph.roster_graph_seed`).
* :func:`consistency_statement`: what every survivor signs in the consistency round (``LABEL_SURVIVOR_SET``;
  :func:`sign_survivor_set`, :func:`verify_survivor_set`): the round, the roster statement, the root of the
  Merkle sum tree over the survivor bitmap and its count |U3|.
* :func:`holders_statement`: the digest of an owner's share holders, put in each of its share boxes (SecAgg+).
* :func:`survivor_statement`: a digest of a sorted survivor id list. Not what the protocol signs (that is
  :func:`consistency_statement`); kept for callers of the earlier API.

The old import paths (:mod:`protocols.pki`, and :mod:`protocols.graph` for :func:`roster_statement`) still
work. Signature failures raise :class:`~secagg_dp.errors.AuthenticationError`; the state machines turn them
into refusals.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from secagg_dp.crypto import signing
from secagg_dp.errors import ParameterError

__all__ = [
    "advertise_statement",
    "roster_statement",
    "consistency_statement",
    "survivor_statement",
    "holders_statement",
    "holders_statements",
    "sign_keys",
    "verify_keys",
    "sign_survivor_set",
    "verify_survivor_set",
]


class Verifier(Protocol):
    """What checks a signature against a client's registered identity (:class:`protocols.pki.KeyRegistry`)."""

    def verify(self, client: int, label: bytes, body: bytes, signature: bytes) -> None: ...


def advertise_statement(round_id: bytes, client: int, enc_pk: bytes, mask_pk: bytes) -> bytes:
    """The body a client signs at check-in: round id, its own id and both per-round X25519 keys."""
    return bytes(round_id) + struct.pack(">I", client) + bytes(enc_pk) + bytes(mask_pk)


def roster_statement(round_id: bytes, n: int, root: bytes) -> bytes:
    """The 32-byte digest naming one roster: SHA-256 over the round id, the number n of entries and the
    Merkle root (:mod:`secagg_dp.crypto.merkle`) of the entries sorted by client id. Clients sign it in the
    consistency round, so two different rosters cannot both gather the signatures a client requires."""
    h = hashlib.sha256(b"secagg-dp/v3/roster\x00" + bytes(round_id) + struct.pack(">I", n) + bytes(root))
    return h.digest()


def consistency_statement(round_id: bytes, roster: bytes, survivors_root: bytes, count: int) -> bytes:
    """The body signed in the consistency round: round id, the roster statement (:func:`roster_statement`),
    the root of the Merkle sum tree over the survivor bitmap and its count |U3| (which each client recomputes
    from the tree, :class:`protocols.messages.SurvivorList`). A signature thus vouches for one roster, one
    survivor set and its size at once."""
    if len(roster) != 32 or len(survivors_root) != 32:
        raise ParameterError("Arguments 'roster' and 'survivors_root' must be 32-byte digests.")
    return bytes(round_id) + bytes(roster) + bytes(survivors_root) + struct.pack(">I", count)


def survivor_statement(round_id: bytes, survivors: Iterable[int]) -> bytes:
    """Round id, number and SHA-256 of the sorted survivor ids (uint32). Not signed by the protocol, whose
    consistency round signs :func:`consistency_statement` (a commitment that also names the roster and lets a
    SecAgg+ client check only its part); kept for callers of the earlier API."""
    if not isinstance(survivors, np.ndarray):
        survivors = np.fromiter(survivors, dtype=np.int64)
    ids = np.sort(survivors.astype(np.int64, copy=False).reshape(-1))  # no Python loop: n = 10^4 ids per client
    if ids.size and (ids[0] < 0 or ids[-1] > 0xFFFFFFFF):
        raise ParameterError("Argument 'survivors' must hold client ids in [0, 2^32 - 1].")
    digest = hashlib.sha256(ids.astype(">u4").tobytes()).digest()
    return bytes(round_id) + struct.pack(">I", ids.size) + digest


def holders_statement(round_id: bytes, owner: int, holders: Iterable[int] | np.ndarray) -> bytes:
    """SHA-256 over the round id, an owner's id and its share holders' ids (ascending): what the owner puts in
    every share box, so a holder can check ids of the owner's other holders that the server relays."""
    if isinstance(holders, np.ndarray):
        ids = np.sort(holders.astype(np.int64, copy=False).reshape(-1))
    else:
        ids = np.sort(np.fromiter(holders, dtype=np.int64))
    h = hashlib.sha256(b"secagg-dp/v3/holders\x00" + bytes(round_id) + struct.pack(">I", owner))
    h.update(ids.astype(">u4").tobytes())
    return h.digest()


def holders_statements(round_id: bytes, owners: Iterable[int], rows: np.ndarray) -> list[bytes]:
    """:func:`holders_statement` of each owner with its row of ``rows`` (one row of holder ids per owner, any
    order within a row), with one conversion of the whole (owners, holders) matrix and the common prefix
    hashed once: a SecAgg+ client checks k + 1 of them before it unmasks."""
    ids = np.sort(np.asarray(rows, dtype=np.int64).reshape(len(rows), -1), axis=1).astype(">u4")
    head = hashlib.sha256(b"secagg-dp/v3/holders\x00" + bytes(round_id))
    out = []
    for owner, row in zip(owners, ids, strict=True):
        h = head.copy()
        h.update(struct.pack(">I", owner))
        h.update(row.tobytes())
        out.append(h.digest())
    return out


def sign_keys(identity: signing.SigningKey, round_id: bytes, client: int, enc_pk: bytes, mask_pk: bytes) -> bytes:
    """``client``'s check-in signature on its two keys (:func:`advertise_statement`, ``LABEL_ADVERTISE_KEYS``)."""
    return identity.sign(signing.LABEL_ADVERTISE_KEYS, advertise_statement(round_id, client, enc_pk, mask_pk))


def verify_keys(
    registry: Verifier, round_id: bytes, client: int, enc_pk: bytes, mask_pk: bytes, signature: bytes
) -> None:
    """Check ``client``'s check-in signature (:func:`sign_keys`) against its registered identity;
    AuthenticationError if it fails."""
    body = advertise_statement(round_id, client, enc_pk, mask_pk)
    registry.verify(client, signing.LABEL_ADVERTISE_KEYS, body, signature)


def sign_survivor_set(identity: signing.SigningKey, statement: bytes) -> bytes:
    """The consistency-round signature on ``statement`` (:func:`consistency_statement`, ``LABEL_SURVIVOR_SET``)."""
    return identity.sign(signing.LABEL_SURVIVOR_SET, statement)


def verify_survivor_set(registry: Verifier, client: int, statement: bytes, signature: bytes) -> None:
    """Check ``client``'s consistency-round signature on ``statement`` (:func:`sign_survivor_set`) against its
    registered identity; AuthenticationError if it fails."""
    registry.verify(client, signing.LABEL_SURVIVOR_SET, statement, signature)
