"""HKDF-SHA256 (RFC 5869) with one distinct ``info`` label per purpose.

Raw X25519 outputs are never used as keys: every use passes through :func:`derive` with its own label,
and the label is followed by the round id and the (ordered) party ids, so keys of different purposes,
rounds or pairs are independent.
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from secagg_dp._validate import check_int
from secagg_dp.errors import ParameterError

__all__ = [
    "LABEL_CHANNEL",
    "LABEL_PAIRWISE_MASK",
    "LABEL_SELF_MASK_COMMIT",
    "LABEL_SIM_CLIENT",
    "LABEL_SIM_SERVER",
    "LABEL_SIM_ROUND",
    "LABEL_SIM_IDENTITY",
    "LABEL_NOISE_LEVEL_SEED",
    "LABEL_NOISE_COMPONENT",
    "LABEL_SIM_NOISE_MASTER",
    "LABELS",
    "derive",
    "context",
    "pair_ids",
]

LABEL_CHANNEL = b"secagg-dp/v1/aead-channel-key"
LABEL_PAIRWISE_MASK = b"secagg-dp/v1/pairwise-mask-seed"
LABEL_SELF_MASK_COMMIT = b"secagg-dp/v1/self-mask-commitment"
LABEL_SIM_CLIENT = b"secagg-dp/v1/simulation/client-randomness"
LABEL_SIM_SERVER = b"secagg-dp/v1/simulation/server-randomness"
LABEL_SIM_ROUND = b"secagg-dp/v1/simulation/round-id"
LABEL_SIM_IDENTITY = b"secagg-dp/v1/simulation/identity-key"
LABEL_NOISE_LEVEL_SEED = b"secagg-dp/v1/noise-level-seed"
LABEL_NOISE_COMPONENT = b"secagg-dp/v1/noise-component-key"
LABEL_SIM_NOISE_MASTER = b"secagg-dp/v1/simulation/noise-master-seed"
LABELS = (
    LABEL_CHANNEL,
    LABEL_PAIRWISE_MASK,
    LABEL_SELF_MASK_COMMIT,
    LABEL_SIM_CLIENT,
    LABEL_SIM_SERVER,
    LABEL_SIM_ROUND,
    LABEL_SIM_IDENTITY,
    LABEL_NOISE_LEVEL_SEED,
    LABEL_NOISE_COMPONENT,
    LABEL_SIM_NOISE_MASTER,
)


_LABEL_SET = frozenset(LABELS)
_PAIR = struct.Struct(">II")
_SHA256 = hashes.SHA256()  # stateless algorithm descriptor, shared by every derivation


def _check_id(i: int) -> None:
    if not (type(i) is int and 0 <= i <= 0xFFFFFFFF):
        check_int("id", i, lo=0, hi=0xFFFFFFFF)  # raises with the standard message (or accepts an np.integer)


def context(label: bytes, round_id: bytes, *ids: int) -> bytes:
    """``label || 0x00 || round_id || ids as big-endian uint32``: the HKDF ``info`` for one use."""
    if label not in _LABEL_SET:
        raise ParameterError(f"Argument 'label' must be one of the registered HKDF labels, not {label!r}.")
    for i in ids:
        _check_id(i)
    packed = _PAIR.pack(*ids) if len(ids) == 2 else struct.pack(f">{len(ids)}I", *ids)
    return label + b"\x00" + bytes(round_id) + packed


def pair_ids(a: int, b: int) -> bytes:
    """The ids of a pair as :func:`context` appends them for the pair's keys: smaller then larger, big-endian
    uint32 (``context(label, round_id, a, b)`` with a < b ends in these 8 bytes)."""
    _check_id(a)
    _check_id(b)
    return _PAIR.pack(a, b) if a < b else _PAIR.pack(b, a)


def derive(ikm: bytes, *, info: bytes, length: int = 32, salt: bytes | None = None) -> bytes:
    """HKDF-SHA256(salt, ikm, info) truncated to ``length`` bytes (RFC 5869)."""
    if type(ikm) is bytes and type(info) is bytes and length == 32 and len(ikm) >= 16 and info.startswith(LABELS):
        return HKDF(algorithm=_SHA256, length=32, salt=salt, info=info).derive(ikm)  # the common case, checked
    if not isinstance(ikm, (bytes, bytearray)) or len(ikm) < 16:
        raise ParameterError("Argument 'ikm' must be at least 16 bytes of key material.")
    if not isinstance(info, (bytes, bytearray)) or not info.startswith(LABELS):
        raise ParameterError("Argument 'info' must start with a registered purpose label (see kdf.LABELS).")
    if not (type(length) is int and 1 <= length <= 255 * 32):
        length = check_int("length", length, lo=1, hi=255 * 32)
    return HKDF(algorithm=_SHA256, length=length, salt=salt, info=bytes(info)).derive(bytes(ikm))
