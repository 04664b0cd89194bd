"""One secure-aggregation round (Bonawitz et al. 2017, active-server mode) with clients dropping at three stages.

The server learns exactly the modular sum of the inputs of the clients whose masked input arrived;
a client that drops after sending it is still summed. Also shows a clean abort below the threshold.
Run: python examples/secagg_round_with_dropouts.py
"""

from __future__ import annotations

import numpy as np

from protocols import run_secagg_round
from secagg_dp.errors import AbortError
from secagg_dp.zq import sum_mod


def main() -> None:
    bits, n, dim = 32, 20, 1000
    rng = np.random.default_rng(1)
    inputs = {cid: rng.integers(0, 2**bits, size=dim, dtype=np.uint64) for cid in range(n)}
    dropouts = {"share_keys": {3}, "masked_input": {5, 11}, "unmasking": {7}}

    # active mode (the default) needs t > 2n/3 = 13.3 share holders; seed=... makes keys and masks
    # reproducible: for simulation only (anyone with the seed can unmask)
    res = run_secagg_round(inputs, bits=bits, threshold=14, dropouts=dropouts, seed=42)
    expected = sum_mod(np.stack([inputs[c] for c in sorted(res.survivors)]), bits)
    print(f"survivors: {len(res.survivors)} of {n}; dropped after sharing keys: {sorted(res.dropped)}")
    print(f"client 7 dropped at unmasking but is summed: {7 in res.survivors}")
    print(f"aggregate equals the survivors' modular sum bit for bit: {np.array_equal(res.aggregate, expected)}")
    print("phase timings (s):", {k: round(v, 3) for k, v in res.timings.items()})
    if not np.array_equal(res.aggregate, expected):
        raise SystemExit("aggregate differs from the survivors' sum")

    try:
        run_secagg_round(inputs, bits=bits, threshold=18, dropouts={"masked_input": {1, 2, 3}}, seed=43)
    except AbortError as exc:
        print(f"below the threshold the round aborts and nothing is reconstructed: {exc}")
    else:
        raise SystemExit("expected an abort with 17 < 18 survivors")


if __name__ == "__main__":
    main()
