"""Noise + codec round trip: clip, encode onto Z_q with discrete Gaussian noise, sum mod q, decode.

Checks the decoded sum against the plain sum of the clipped vectors within the codec's deterministic
decode-error bound (Kairouz, Liu & Steinke 2021 pipeline), and prints the wrap-around bound.
Run: python examples/noise_codec_roundtrip.py
"""

from __future__ import annotations

import math

import numpy as np

from secagg_dp.noise import sample_discrete_gaussian
from secagg_dp.quantize import ZqCodec, clip_l2
from secagg_dp.zq import sum_mod


def main() -> None:
    rng = np.random.default_rng(0)  # reproducible simulation; rng=None would use the secure default
    n, dim, bits, clip, sigma = 100, 1000, 20, 1.0, 0.01
    x = rng.normal(size=(n, dim)) / math.sqrt(dim)

    scale = ZqCodec.scale_for(bits=bits, n_clients=n, clip=clip, dim=dim, sigma=sigma)
    codec = ZqCodec(dim, bits, clip, scale, rotation_seed=int(rng.integers(2**31)))
    noise = sample_discrete_gaussian(scale * sigma, (n, codec.padded_dim), rng=rng)
    encoded = codec.encode(x, noise=noise, rng=rng)  # what each client sends (uint64 residues)
    decoded = codec.decode(sum_mod(encoded, bits))  # what the server recovers

    error = float(np.linalg.norm(decoded - clip_l2(x, clip).sum(axis=0)))
    bound = codec.decode_error_bound(n, float(np.linalg.norm(noise.sum(axis=0))))
    wrap = codec.wrap_bound(n, sigma)
    print(f"q = 2^{bits}, scale s = {scale:.1f}, padded dim d = {codec.padded_dim}")
    print(f"L2 sensitivity (grid units): {codec.l2_sensitivity:.1f}; L1: {codec.l1_sensitivity:.3g}")
    print(f"decode error {error:.4f} <= bound {bound:.4f} (noise included)")
    print(
        f"P(some coordinate wraps) <= {wrap.any_coordinate:.3g}; expected wrapped coordinates <= "
        f"{wrap.expected_wrapped:.3g}"
    )
    if error > bound:
        raise SystemExit("decode error above its bound: a wrap-around happened")


if __name__ == "__main__":
    main()
