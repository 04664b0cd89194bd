"""Long-term client identities: an Ed25519 key registry (the simulation's stand-in for a PKI).

In a deployment this is the device-attestation service or key registry that binds a client id to a
long-term public key before any round; here the simulation creates it (:func:`create_identities`) and
hands the same registry to the server and every client. Clients sign their per-round X25519 keys and the
survivor set with their identity key (Bonawitz et al. 2017, Sec. 6, active adversary), and every party
verifies a signature against the registry, never against a key the server relays.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from protocols.statements import (  # the signed statements live in protocols.statements; importable here too
    advertise_statement,
    consistency_statement,
    holders_statement,
    holders_statements,
    survivor_statement,
)
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
