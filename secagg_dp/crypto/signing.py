"""Ed25519 signatures (RFC 8032) via ``cryptography``, with one domain-separation label per signed statement.

A signature is always over ``label || 0x00 || body`` with a label from :data:`LABELS`, so a signature made
for one purpose (advertised keys, a survivor set) can never be replayed as another. Any verification
failure raises one opaque :class:`AuthenticationError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError

__all__ = [
    "PUBLIC_KEY_LEN",
    "SIGNATURE_LEN",
    "LABEL_ADVERTISE_KEYS",
    "LABEL_SURVIVOR_SET",
    "LABELS",
    "SigningKey",
    "generate_signing_key",
    "signing_key_from_seed",
    "load_public_key",
    "verify",
]

PUBLIC_KEY_LEN = 32
SIGNATURE_LEN = 64
LABEL_ADVERTISE_KEYS = b"secagg-dp/v2/sign/advertise-keys"
LABEL_SURVIVOR_SET = b"secagg-dp/v2/sign/survivor-set"
LABELS = (LABEL_ADVERTISE_KEYS, LABEL_SURVIVOR_SET)


def _message(label: bytes, body: bytes) -> bytes:
    if label not in LABELS:
        raise ParameterError(f"Argument 'label' must be one of the registered signature labels, not {label!r}.")
    if not isinstance(body, (bytes, bytearray)):
        raise TypeError(f"Argument 'body' must be bytes, not {type(body).__name__}.")
    return label + b"\x00" + bytes(body)


@dataclass(frozen=True)
class SigningKey:
    """An Ed25519 key pair; the private half is excluded from ``repr`` and equality."""

    public: bytes
    _key: Ed25519PrivateKey = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.public, bytes) or len(self.public) != PUBLIC_KEY_LEN:
            raise ParameterError(f"Ed25519 public keys must be {PUBLIC_KEY_LEN} bytes.")
        if not isinstance(self._key, Ed25519PrivateKey):
            raise TypeError("Argument '_key' must be an Ed25519PrivateKey.")

    def sign(self, label: bytes, body: bytes) -> bytes:
        """The 64-byte signature of ``label || 0x00 || body``."""
        return self._key.sign(_message(label, body))


def signing_key_from_seed(seed: bytes) -> SigningKey:
    """The Ed25519 key whose 32-byte private seed is ``seed`` (RFC 8032, Sec. 5.1.5)."""
    if not isinstance(seed, (bytes, bytearray)) or len(seed) != 32:
        raise ParameterError("Argument 'seed' must be 32 bytes.")
    key = Ed25519PrivateKey.from_private_bytes(bytes(seed))
    return SigningKey(key.public_key().public_bytes_raw(), key)


def generate_signing_key(*, source: RandomSource | None = None) -> SigningKey:
    """A fresh Ed25519 key from 32 bytes of ``source`` (``None``: ``os.urandom``)."""
    return signing_key_from_seed(resolve_source(source).bytes(32))


def load_public_key(public: bytes) -> Ed25519PublicKey:
    """Parse a 32-byte Ed25519 public key once (callers that verify often keep the object)."""
    try:
        return Ed25519PublicKey.from_public_bytes(bytes(public))
    except ValueError:
        raise AuthenticationError("invalid Ed25519 public key") from None


def verify(public: bytes | Ed25519PublicKey, label: bytes, body: bytes, signature: bytes) -> None:
    """Check ``signature`` on ``label || 0x00 || body`` under ``public`` (raw bytes or a loaded key);
    any failure raises AuthenticationError."""
    msg = _message(label, body)
    if not isinstance(signature, (bytes, bytearray)) or len(signature) != SIGNATURE_LEN:
        raise AuthenticationError("signature failed verification")
    key = public if isinstance(public, Ed25519PublicKey) else load_public_key(public)
    try:
        key.verify(bytes(signature), msg)
    except InvalidSignature:
        raise AuthenticationError("signature failed verification") from None
