"""Long-term client identities: an Ed25519 key registry (the simulation's stand-in for a PKI).

In a deployment this is the device-attestation service or key registry that binds a client id to a
long-term public key before any round; here the simulation creates it (:func:`create_identities`) and
hands the same registry to the server and every client. Clients sign their per-round X25519 keys and the
survivor set with their identity key (Bonawitz et al. 2017, Sec. 6, active adversary), and every party
verifies a signature against the registry, never against a key the server relays.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from secagg_dp._validate import check_int
from secagg_dp.crypto import signing
from secagg_dp.crypto.randomness import RandomSource
from secagg_dp.errors import AuthenticationError, ParameterError

__all__ = [
    "KeyRegistry",
    "create_identities",
    "advertise_statement",
    "survivor_statement",
    "consistency_statement",
    "holders_statement",
    "holders_statements",
]

_MAX_ID = 0xFFFFFFFD
_MEMO_MAX = 1 << 18  # remembered successful verifications (about 200 bytes each) before the memo is reset


class KeyRegistry:
    """Client id -> Ed25519 public key, append-only: a registered id cannot be re-bound to another key."""

    def __init__(self, keys: Mapping[int, bytes] | None = None) -> None:
        self._keys: dict[int, bytes] = {}
        self._loaded: dict[int, Ed25519PublicKey] = {}  # parsed keys, filled on first verification
        self._verified: set[tuple[int, bytes, bytes, bytes]] = set()  # (client, label, body, signature) that passed
        for cid, pk in dict(keys or {}).items():
            self.register(cid, pk)

    def __repr__(self) -> str:
        return f"KeyRegistry({len(self._keys)} clients)"

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, client: object) -> bool:
        return client in self._keys

    def register(self, client: int, public: bytes) -> None:
        """Bind ``client`` to the 32-byte Ed25519 key ``public`` (idempotent for the same key)."""
        client = check_int("client", client, lo=0, hi=_MAX_ID)
        if not isinstance(public, bytes) or len(public) != signing.PUBLIC_KEY_LEN:
            raise ParameterError(f"Argument 'public' must be {signing.PUBLIC_KEY_LEN} bytes.")
        old = self._keys.get(client)
        if old is not None and old != public:
            raise ParameterError(f"Argument 'client' {client} is already registered with another key.")
        self._keys[client] = public

    def public_key(self, client: int) -> bytes:
        """The registered key of ``client``; an unknown client raises AuthenticationError."""
        try:
            return self._keys[client]
        except KeyError:
            raise AuthenticationError("signer is not registered") from None

    def verify(self, client: int, label: bytes, body: bytes, signature: bytes) -> None:
        """Check ``client``'s signature; any failure (unknown client, bad signature) raises AuthenticationError.

        A successful check is remembered by its exact bytes (client, label, body, signature): Ed25519
        verification is a deterministic function of those bytes and of the registered key, which cannot be
        re-bound, so asking again gives the same answer. This matters where one process plays many parties
        (the simulation, where each roster entry is checked by k clients and each survivor-set signature by
        many): each distinct signature costs one verification. Failures are never remembered.
        """
        memo = (client, label, body, signature)
        if type(body) is bytes and type(signature) is bytes and type(label) is bytes and memo in self._verified:
            return
        key = self._loaded.get(client)
        if key is None:
            key = self._loaded[client] = signing.load_public_key(self.public_key(client))
        signing.verify(key, label, body, signature)
        if type(body) is bytes and type(signature) is bytes and type(label) is bytes:
            if len(self._verified) >= _MEMO_MAX:
                self._verified.clear()
            self._verified.add(memo)

    @property
    def keys(self) -> Mapping[int, bytes]:
        """Read-only view of the registered keys."""
        return MappingProxyType(self._keys)


def create_identities(
    ids: Iterable[int], source_for: Callable[[int], RandomSource | None]
) -> tuple[KeyRegistry, dict[int, signing.SigningKey]]:
    """One Ed25519 identity per client (from ``source_for(id)``; None: os.urandom) and the registry of them."""
    keys = {int(c): signing.generate_signing_key(source=source_for(int(c))) for c in ids}
    return KeyRegistry({c: k.public for c, k in keys.items()}), keys


def advertise_statement(round_id: bytes, client: int, enc_pk: bytes, mask_pk: bytes) -> bytes:
    """The body a client signs at check-in: round id, its own id and both per-round X25519 keys."""
    return bytes(round_id) + struct.pack(">I", client) + bytes(enc_pk) + bytes(mask_pk)


def survivor_statement(round_id: bytes, survivors: Iterable[int]) -> bytes:
    """The body signed in the consistency round: round id and SHA-256 of the sorted survivor ids (uint32)."""
    if not isinstance(survivors, np.ndarray):
        survivors = np.fromiter(survivors, dtype=np.int64)
    ids = np.sort(survivors.astype(np.int64, copy=False).reshape(-1))  # no Python loop: n = 10^4 ids per client
    if ids.size and (ids[0] < 0 or ids[-1] > 0xFFFFFFFF):
        raise ParameterError("Argument 'survivors' must hold client ids in [0, 2^32 - 1].")
    digest = hashlib.sha256(ids.astype(">u4").tobytes()).digest()
    return bytes(round_id) + struct.pack(">I", ids.size) + digest


def consistency_statement(round_id: bytes, roster: bytes, survivors_root: bytes, count: int) -> bytes:
    """The body signed in the consistency round: round id, the roster statement
    (:func:`protocols.graph.roster_statement`), the root of the Merkle sum tree over the survivor bitmap and
    its count |U3| (which each client recomputes from the tree, :class:`protocols.messages.SurvivorList`). A
    signature thus vouches for one roster, one survivor set and its size at once."""
    if len(roster) != 32 or len(survivors_root) != 32:
        raise ParameterError("Arguments 'roster' and 'survivors_root' must be 32-byte digests.")
    return bytes(round_id) + bytes(roster) + bytes(survivors_root) + struct.pack(">I", count)


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
