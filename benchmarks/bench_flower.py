"""Flower's SecAgg+ against ours: one round, all parties in one process, same n, k, t, d and dropouts.

Flower (``flwr``) is not a dependency of this project; without it the script says so and exits 0
(install it in a separate environment to run the comparison: ``pip install flwr``).

Flower side: the client steps of ``flwr.client.mod.secure_aggregation.secaggplus_mod`` (``_setup``,
``_share_keys``, ``_collect_masked_vectors``, ``_unmask``: SECP384R1 key agreement, Fernet boxes,
pycryptodome Shamir, masks from ``pseudo_rand_gen``) called directly for every client, with the routing
and the mask removal of ``flwr.server.workflow.secure_aggregation.secaggplus_workflow`` done here as that
workflow does them (neighbours: a ring of ``num_shares`` consecutive nodes, self included; the unmasking
sums, reconstructs each seed with ``combine_shares`` and subtracts its masks). Flower's messaging layer
(gRPC, records, serialisation) is not timed, so the ratio understates what a Flower deployment costs.
Ours: ``protocols.run_secagg_round`` in active mode (signatures, consistency round) on a Harary graph of
degree k. Flower wants an odd number of shares, so it gets k + 1 shares rounded up to odd (k = 15: 17
shares, 16 neighbours; k = 32: 33). Dropout: every 10th client goes silent after the key sharing (it
sends no masked input), so both sides reconstruct the dropped clients' pairwise masks.

Run: python benchmarks/bench_flower.py [--d D] [--case N,K,T ...]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time

import numpy as np

DEFAULT_CASES = ((100, 15, 9), (1000, 32, 17))  # (n, k, t): t > (k + 1)/2, what active mode asks for


def flower_round(n: int, k: int, t: int, d: int) -> float:
    """Seconds of one Flower SecAgg+ round (client steps + the workflow's routing and unmasking)."""
    cm = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")  # the module, not the mod
    from flwr.common import bytes_to_ndarray, ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.common.secure_aggregation.crypto.shamir import combine_shares
    from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
    from flwr.common.secure_aggregation.ndarrays_arithmetic import (
        factor_extract,
        get_parameters_shape,
        parameters_addition,
        parameters_mod,
        parameters_subtraction,
    )
    from flwr.common.secure_aggregation.quantization import dequantize
    from flwr.common.secure_aggregation.secaggplus_constants import Key
    from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
    from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

    shares = k + 1 + (k % 2 == 1 and k + 1 < n)  # Flower's workflow makes an even share count odd
    half = shares >> 1
    nids = list(range(1, n + 1))
    rng = np.random.default_rng(1)
    params = {c: ndarrays_to_parameters([rng.uniform(-1, 1, d)]) for c in nids}
    gone = set(nids[::10])  # silent after sharing keys
    cfg = {
        Key.SAMPLE_NUMBER: n,
        Key.SHARE_NUMBER: shares,
        Key.THRESHOLD: t,
        Key.CLIPPING_RANGE: 8.0,
        Key.TARGET_RANGE: 1 << 16,
        Key.MOD_RANGE: 1 << 32,
        Key.MAX_WEIGHT: 1.0,
    }
    t0 = time.perf_counter()
    states = {c: cm.SecAggPlusState(nid=c) for c in nids}
    pks = {c: tuple(cm._setup(states[c], cfg).values()) for c in nids}
    nbrs = {c: {nids[(i + o) % n] for o in range(-half, half + 1)} for i, c in enumerate(nids)}
    inbox: dict[int, tuple[list[int], list[bytes]]] = {c: ([], []) for c in nids}
    for c in nids:
        out = cm._share_keys(states[c], {str(v): pks[v] for v in sorted(nbrs[c])})
        for v, box in zip(out[Key.DESTINATION_LIST], out[Key.CIPHERTEXT_LIST], strict=True):
            inbox[v][0].append(c)
            inbox[v][1].append(box)
    total = None
    alive = [c for c in nids if c not in gone]
    for c in alive:
        srcs, boxes = inbox[c]
        out = cm._collect_masked_vectors(states[c], {Key.CIPHERTEXT_LIST: boxes, Key.SOURCE_LIST: srcs}, 1, params[c])
        arrs = [bytes_to_ndarray(b) for b in out[Key.MASKED_PARAMETERS]]
        total = arrs if total is None else parameters_addition(total, arrs)
    collected: dict[int, list[bytes]] = {c: [] for c in nids}
    for c in alive:
        out = cm._unmask(
            states[c],
            {
                Key.ACTIVE_NODE_ID_LIST: sorted(nbrs[c] - gone),
                Key.DEAD_NODE_ID_LIST: sorted(nbrs[c] & gone),
            },
        )
        for owner, share in zip(out[Key.NODE_ID_LIST], out[Key.SHARE_LIST], strict=True):
            collected[owner].append(share)
    shape = get_parameters_shape(total)
    for c, share_list in collected.items():
        assert len(share_list) >= t
        secret = combine_shares(share_list)
        if c not in gone:
            total = parameters_subtraction(total, pseudo_rand_gen(secret, 1 << 32, shape))
        else:
            for v in nbrs[c] - {c}:
                key = generate_shared_key(bytes_to_private_key(secret), bytes_to_public_key(pks[v][0]))
                mask = pseudo_rand_gen(key, 1 << 32, shape)
                total = parameters_addition(total, mask) if c > v else parameters_subtraction(total, mask)
    total = parameters_mod(total, 1 << 32)
    secs = time.perf_counter() - t0
    # what the workflow does next: the mean of the survivors' vectors, to quantisation error
    q_total, recon = factor_extract(total)
    mean = dequantize(recon, 8.0, 1 << 16)[0]
    mean = (mean - (len(alive) - 1) * 8.0) * ((1 << 16) / q_total)
    truth = np.mean([parameters_to_ndarrays(params[c])[0] for c in alive], axis=0)
    assert np.allclose(mean, truth, atol=1e-3), "Flower round did not unmask to the survivors' mean"
    return secs


def our_round(n: int, k: int, t: int, d: int, workers: int | None = 1) -> float:
    """Seconds of one active SecAgg+ round of ours (run_secagg_round), same dropouts; the sum is checked.
    ``workers=1``: every party in this process, as Flower's side is here; ``None``: the default pool (the clients
    in forked worker processes over the usable cores for a round this large)."""
    from protocols import run_secagg_round

    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << 32, size=d, dtype=np.uint64) for i in range(1, n + 1)}
    t0 = time.perf_counter()
    res = run_secagg_round(
        inputs,
        bits=32,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": set(range(1, n + 1, 10))},
        seed=1,
        round_id=bytes(16),
        workers=workers,
    )
    secs = time.perf_counter() - t0
    expect = sum(inputs[c] for c in res.survivors) & np.uint64(0xFFFFFFFF)
    assert np.array_equal(res.aggregate, expect)
    return secs


def _case(text: str) -> tuple[int, int, int]:
    n, k, t = (int(x) for x in text.split(","))
    return n, k, t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--d", type=int, default=10**3, help="vector length (default: %(default)s)")
    ap.add_argument("--case", type=_case, action="append", metavar="N,K,T", help="a case (repeatable)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("flwr") is None:
        print("bench_flower: flwr is not installed; skipped (pip install flwr in a separate environment)")
        return 0
    import flwr

    our_round(4, 2, 2, 4)  # warm-up (finite-field tables, imports)
    print(f"Flower {flwr.__version__} SecAgg+ vs ours (active), d = {args.d:,}, 10% dropout after key sharing")
    for n, k, t in args.case or DEFAULT_CASES:
        ours = our_round(n, k, t, args.d)
        pooled = our_round(n, k, t, args.d, workers=None)
        theirs = flower_round(n, k, t, args.d)
        print(
            f"n={n:,} k={k} t={t}: Flower {theirs:.2f} s, ours {ours:.2f} s per round (all parties, one process): "
            f"ratio {theirs / ours:.1f}x; ours with the default pool (clients in worker processes over the "
            f"usable cores) {pooled:.2f} s: {theirs / pooled:.1f}x"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
