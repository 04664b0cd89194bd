"""X25519 key agreement (RFC 7748) via ``cryptography``.

Each client holds two key pairs per round: one for the AEAD channel, one for mask agreement. The shared
secret is raw curve output and must go through :func:`secagg_dp.crypto.kdf.derive` before any use.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError

__all__ = [
    "KEY_LEN",
    "KeyPair",
    "generate_keypair",
    "keypair_from_private",
    "public_from_private",
    "load_public",
    "exchange",
    "is_low_order",
]

KEY_LEN = 32


@dataclass(frozen=True)
class KeyPair:
    """An X25519 key pair; the private half is excluded from ``repr`` and equality."""

    public: bytes
    private: bytes = field(repr=False, compare=False)
    _key: X25519PrivateKey = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.public) != KEY_LEN or len(self.private) != KEY_LEN:
            raise ParameterError(f"X25519 keys must be {KEY_LEN} bytes.")


def keypair_from_private(private: bytes) -> KeyPair:
    """The key pair whose private scalar is the 32 bytes ``private`` (clamped by X25519 itself)."""
    if not isinstance(private, (bytes, bytearray)) or len(private) != KEY_LEN:
        raise ParameterError(f"Argument 'private' must be {KEY_LEN} bytes.")
    key = X25519PrivateKey.from_private_bytes(bytes(private))
    return KeyPair(public=key.public_key().public_bytes_raw(), private=bytes(private), _key=key)


def generate_keypair(*, source: RandomSource | None = None) -> KeyPair:
    """A fresh key pair from 32 bytes of ``source`` (``None``: ``os.urandom``)."""
    return keypair_from_private(resolve_source(source).bytes(KEY_LEN))


def public_from_private(private: bytes) -> bytes:
    """The X25519 public key of a private scalar (used to verify a reconstructed key)."""
    return keypair_from_private(private).public


def load_public(peer_public: bytes) -> X25519PublicKey:
    """Parse a 32-byte X25519 public key once, for callers that use it in many exchanges."""
    if not isinstance(peer_public, (bytes, bytearray)) or len(peer_public) != KEY_LEN:
        raise ParameterError(f"Argument 'peer_public' must be {KEY_LEN} bytes.")
    try:
        return X25519PublicKey.from_public_bytes(bytes(peer_public))
    except ValueError:
        raise AuthenticationError("key agreement failed") from None


def exchange(own: KeyPair, peer_public: bytes | X25519PublicKey) -> bytes:
    """Raw X25519(own.private, peer_public) for a 32-byte key or one parsed by :func:`load_public`.
    A low-order peer key (all-zero output) raises AuthenticationError."""
    peer = peer_public if isinstance(peer_public, X25519PublicKey) else load_public(peer_public)
    try:
        return own._key.exchange(peer)
    except ValueError:  # cryptography refuses the all-zero shared secret of low-order points
        raise AuthenticationError("key agreement failed") from None


_P = 2**255 - 19
# u-coordinates (mod p) of the points of order dividing 8 on Curve25519 and of order dividing 4 on its twist:
# 0 (order 2), 1 and p - 1 (order 4, one on the curve, one on the twist) and the two of order 8 (Bernstein,
# "Curve25519: new Diffie-Hellman speed records", 2006, and libsodium's X25519 blocklist). Completeness is checked
# in tests/crypto/test_signing.py from the x-only doubling formula.
_SMALL_ORDER_U = frozenset(
    {
        0,
        1,
        _P - 1,
        325606250916557431795983626356110631294008115727848805560023387167927233504,
        39382357235489614581723060781553021112529911719440698176882885853963445705823,
    }
)


def is_low_order(public: bytes) -> bool:
    """Whether an X25519 public key lies in the small subgroup (RFC 7748, Sec. 6.1: e.g. the all-zero key).

    Such a key makes every shared secret with it all-zero, for any private scalar (scalars are clamped to
    multiples of the cofactor 8). The key is decoded as X25519 decodes it (RFC 7748, Sec. 5: the top bit
    masked, the value reduced mod p) and looked up among the five small-order u-coordinates; this equals
    checking one exchange against a fixed scalar for the all-zero output (tested), at a table look-up's cost.
    """
    if not isinstance(public, (bytes, bytearray)) or len(public) != KEY_LEN:
        raise ParameterError(f"Argument 'public' must be {KEY_LEN} bytes.")
    return (int.from_bytes(public, "little") & ((1 << 255) - 1)) % _P in _SMALL_ORDER_U
