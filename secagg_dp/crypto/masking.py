"""The masking recipe of secure aggregation (Bonawitz et al. 2017, Sec. 4), built only from this package.

    y_u = x_u + PRG(b_u) + sum_{v in N(u), v > u} PRG(s_uv) - sum_{v in N(u), v < u} PRG(s_uv)   (mod 2^bits)

b_u is a fresh 32-byte self-mask seed; s_uv = HKDF(X25519(sk_u, pk_v), info = pairwise label, round, min(u,v),
max(u,v)) is symmetric in (u, v), so the pairwise terms cancel in the sum over survivors. The channel key
for the shares between u and v is derived from the other key pair with a different label.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey

from secagg_dp.crypto import kdf
from secagg_dp.crypto.keys import KeyPair, exchange
from secagg_dp.crypto.prg import SEED_LEN, MaskStream, accumulate_mask, word_dtype
from secagg_dp.crypto.randomness import RandomSource, resolve_source
from secagg_dp.zq import check_bits, check_residues

__all__ = [
    "new_self_mask_seed",
    "pairwise_seed",
    "channel_key",
    "self_mask_commitment",
    "mask_sign",
    "mask_input",
    "neighbour_secrets",
    "mask_input_blocks",
    "apply_masks",
    "new_accumulator",
    "finish_accumulator",
]


def new_self_mask_seed(*, source: RandomSource | None = None) -> bytes:
    """A fresh 32-byte self-mask seed b_u."""
    return resolve_source(source).bytes(SEED_LEN)


def _pair_key(
    label: bytes, own: KeyPair, peer_public: bytes | X25519PublicKey, round_id: bytes, own_id: int, peer_id: int
) -> bytes:
    """HKDF-SHA256(X25519(own, peer), info = label || round || min id || max id): the same key on both sides."""
    lo, hi = sorted((own_id, peer_id))
    info = kdf.context(label, round_id, lo, hi)
    return kdf.derive(exchange(own, peer_public), info=info)


def pairwise_seed(
    own: KeyPair, peer_public: bytes | X25519PublicKey, *, round_id: bytes, own_id: int, peer_id: int
) -> bytes:
    """s_uv = HKDF-SHA256(X25519(own, peer), info = 'pairwise-mask-seed' || round || min id || max id)."""
    return _pair_key(kdf.LABEL_PAIRWISE_MASK, own, peer_public, round_id, own_id, peer_id)


def channel_key(
    own: KeyPair, peer_public: bytes | X25519PublicKey, *, round_id: bytes, own_id: int, peer_id: int
) -> bytes:
    """AES-256-GCM key for shares between two clients: HKDF over X25519 of their channel key pairs."""
    return _pair_key(kdf.LABEL_CHANNEL, own, peer_public, round_id, own_id, peer_id)


def neighbour_secrets(
    enc: KeyPair,
    mask: KeyPair,
    peers: Iterable[tuple[int, bytes | X25519PublicKey, bytes | X25519PublicKey]],
    *,
    round_id: bytes,
    own_id: int,
) -> list[tuple[bytes, bytes]]:
    """(:func:`channel_key`, :func:`pairwise_seed`) with each (peer id, channel public key, mask public key):
    the same bytes, with the two HKDF ``info`` prefixes built once for all neighbours."""
    ch = kdf.context(kdf.LABEL_CHANNEL, round_id, own_id)[:-4]  # label || 0x00 || round id (own_id checked)
    pw = kdf.LABEL_PAIRWISE_MASK + ch[len(kdf.LABEL_CHANNEL) :]
    out = []
    for peer_id, enc_pk, mask_pk in peers:
        ids = kdf.pair_ids(own_id, peer_id)
        out.append(
            (kdf.derive(exchange(enc, enc_pk), info=ch + ids), kdf.derive(exchange(mask, mask_pk), info=pw + ids))
        )
    return out


def self_mask_commitment(seed: bytes, *, round_id: bytes, owner: int) -> bytes:
    """SHA-256(label || round || owner || b_u): lets the server check a reconstructed b_u (seed has 256 bits
    of entropy, so the digest hides it in the random-oracle model). Our addition, not in Bonawitz et al."""
    return hashlib.sha256(kdf.context(kdf.LABEL_SELF_MASK_COMMIT, round_id, owner) + bytes(seed)).digest()


def mask_sign(own_id: int, peer_id: int) -> int:
    """+1 if the peer's id is larger, else -1 (the sign of PRG(s_uv) in y_u)."""
    return 1 if peer_id > own_id else -1


def new_accumulator(x: np.ndarray, bits: int) -> np.ndarray:
    """A fresh accumulator (dtype ``word_dtype(bits)``) holding a copy of the residues ``x``."""
    return np.array(x, dtype=word_dtype(bits), copy=True, order="C").ravel()


def finish_accumulator(acc: np.ndarray, bits: int) -> np.ndarray:
    """Reduce an accumulator to uint64 residues in [0, 2^bits)."""
    return acc.astype(np.uint64) & np.uint64((1 << bits) - 1)


def apply_masks(acc: np.ndarray, bits: int, *, add: Iterable[bytes] = (), subtract: Iterable[bytes] = ()) -> np.ndarray:
    """acc + sum PRG(add) - sum PRG(subtract) mod 2^bits as uint64 residues (``acc`` is updated in place)."""
    bits = check_bits(bits)
    for seed in add:
        accumulate_mask(acc, seed, bits, sign=1)
    for seed in subtract:
        accumulate_mask(acc, seed, bits, sign=-1)
    return finish_accumulator(acc, bits)


def mask_input(x: np.ndarray, *, bits: int, self_seed: bytes, pairwise: Iterable[tuple[bytes, int]]) -> np.ndarray:
    """y = x + PRG(self_seed) + sum sign * PRG(seed) over ``pairwise`` (seed, sign) pairs, mod 2^bits."""
    bits = check_bits(bits)
    acc = new_accumulator(check_residues("x", x, bits), bits)
    plus: list[bytes] = [self_seed]
    minus: list[bytes] = []
    for seed, sign in pairwise:
        (plus if sign == 1 else minus).append(seed)
    return apply_masks(acc, bits, add=plus, subtract=minus)


def mask_input_blocks(
    x_blocks: Iterable[np.ndarray], *, bits: int, self_seed: bytes, pairwise: Iterable[tuple[bytes, int]]
) -> Iterator[np.ndarray]:
    """:func:`mask_input` of the concatenation of ``x_blocks``, yielded block by block (uint64 residues): each
    mask's PRG stream continues from block to block, so only one block of each vector exists at a time."""
    bits = check_bits(bits)
    streams = [(MaskStream(self_seed, bits), 1)] + [(MaskStream(seed, bits), sign) for seed, sign in pairwise]
    for xb in x_blocks:
        acc = new_accumulator(check_residues("x", xb, bits), bits)
        for stream, sign in streams:
            stream.accumulate(acc, sign=sign)
        yield finish_accumulator(acc, bits)
