"""Randomness policy.

With ``rng=None`` every sampler uses a fresh cryptographically strong generator: numpy's ``Generator``
over randomgen's ``AESCounter`` (AES-128 in counter mode, AES-NI when available) keyed from OS entropy.
A caller who wants reproducible simulations passes any seeded ``np.random.Generator`` explicitly;
that choice is then the caller's and is not cryptographically strong unless the bit generator is.

Masks and keys of the secure-aggregation protocol never come from here: they come from keyed
cryptographic streams (``secagg_dp.crypto``).
"""

from __future__ import annotations

import numpy as np
from randomgen import AESCounter

__all__ = ["secure_generator", "resolve_rng"]


def secure_generator() -> np.random.Generator:
    """A new ``Generator`` over AES-CTR seeded from OS entropy (``os.urandom`` via SeedSequence)."""
    return np.random.Generator(AESCounter())


def resolve_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """Return ``rng`` if given, else a new cryptographically strong generator.

    Raises ``TypeError`` for anything that is not a ``np.random.Generator`` (a bare int seed is refused
    on purpose: reproducibility must be an explicit choice of generator).
    """
    if rng is None:
        return secure_generator()
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"Argument 'rng' must be a numpy.random.Generator or None, not {type(rng).__name__}.")
    return rng
