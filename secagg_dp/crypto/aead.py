"""Authenticated encryption of Shamir shares: AES-256-GCM with associated data binding round, sender, recipient.

Wire format of a sealed box: 12-byte nonce || ciphertext || 16-byte tag. Any failure to authenticate
(tampering, wrong key, wrong associated data: another round, sender or recipient) raises one opaque
:class:`AuthenticationError`.
"""

from __future__ import annotations

import struct

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from secagg_dp._validate import check_int
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.errors import AuthenticationError, ParameterError

__all__ = ["NONCE_LEN", "TAG_LEN", "OVERHEAD", "associated_data", "seal", "open_sealed"]

NONCE_LEN = 12
TAG_LEN = 16
OVERHEAD = NONCE_LEN + TAG_LEN
_AD_TAG = b"secagg-dp/v1/share-ad"
_IDS = struct.Struct(">II")


def associated_data(round_id: bytes, sender: int, recipient: int) -> bytes:
    """Associated data ``tag || round_id || sender || recipient`` (ids as big-endian uint32)."""
    if not (type(sender) is int and 0 <= sender <= 0xFFFFFFFF):
        check_int("sender", sender, lo=0, hi=0xFFFFFFFF)  # raises with the standard message (or accepts np ints)
    if not (type(recipient) is int and 0 <= recipient <= 0xFFFFFFFF):
        check_int("recipient", recipient, lo=0, hi=0xFFFFFFFF)
    return _AD_TAG + bytes(round_id) + _IDS.pack(sender, recipient)


def _aead(key: bytes) -> AESGCM:
    if type(key) is bytes and len(key) == 32:
        return AESGCM(key)
    if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
        raise ParameterError("Argument 'key' must be 32 bytes (AES-256).")
    return AESGCM(bytes(key))


def seal(key: bytes, plaintext: bytes, ad: bytes, *, source: RandomSource | None = None) -> bytes:
    """AES-256-GCM encryption with a random 96-bit nonce drawn from ``source``."""
    nonce = resolve_source(source).bytes(NONCE_LEN)
    if type(plaintext) is not bytes:
        plaintext = bytes(plaintext)
    return nonce + _aead(key).encrypt(nonce, plaintext, ad if type(ad) is bytes else bytes(ad))


def open_sealed(key: bytes, box: bytes, ad: bytes) -> bytes:
    """Decrypt and authenticate ``box``; any failure raises the same opaque AuthenticationError."""
    if len(box) < OVERHEAD:
        raise AuthenticationError("ciphertext failed authentication")
    try:
        box = box if type(box) is bytes else bytes(box)
        return _aead(key).decrypt(box[:NONCE_LEN], box[NONCE_LEN:], ad if type(ad) is bytes else bytes(ad))
    except InvalidTag:
        raise AuthenticationError("ciphertext failed authentication") from None
