"""Cryptographic building blocks of secure aggregation (hazardous primitives) and the masking recipe.

Primitives: :mod:`.prg` (AES-256-CTR to exactly uniform Z_q), :mod:`.kdf` (HKDF-SHA256, one label per
purpose), :mod:`.keys` (X25519), :mod:`.signing` (Ed25519), :mod:`.aead` (AES-256-GCM with bound associated data),
:mod:`.shamir` (GF(65537) with discrete-log tables), :mod:`.randomness` (OS or seeded simulation source),
:mod:`.prp` (a keyed permutation of [0, n): the SecAgg+ ring layout). The safe
recipe that combines them is :mod:`.masking`; protocol code should use it rather than the primitives directly.
"""

from secagg_dp.crypto import aead, kdf, keys, masking, prg, randomness, shamir, signing
from secagg_dp.crypto.randomness import OsRandom, RandomSource, SeededRandom

__all__ = [
    "aead",
    "kdf",
    "keys",
    "masking",
    "prg",
    "randomness",
    "shamir",
    "signing",
    "OsRandom",
    "RandomSource",
    "SeededRandom",
]
