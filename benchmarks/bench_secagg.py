"""Secure-aggregation benchmarks; every figure is printed with its baseline measured in the same run.

(a) mask expansion, d = 10^6 in Z_{2^32}, vs raw AES-256-CTR keystream of the same bytes + one numpy add
(b) one client's masking with k = 2..100 neighbours vs (k + 1) x (keystream + add)
(c) Shamir share and reconstruct of a 32-byte secret, t = 51, n = 100 (target <= 10 ms each)
(d) full round n = 100, d = 10^5, 10% dropout after masking (active mode): full graph t = 67, SecAgg+ k = 15
(e) SecAgg+ n = 1000, d = 10^4, 10% dropout after masking, (k, t) from secaggplus_parameters (5% corrupt)
(f) active vs semi-honest in the same run, same (n, k, t, d, dropouts): the extra cost per round of the
    signatures and the consistency round, at n = 100 full graph and n = 1000 SecAgg+ (k, t from the rule)
(g) --scale: one active SecAgg+ round (run_secagg_round alone) at n = 10^3 and 10^4, d = 10^3, 10% dropout
    after masking, (k, t) from secaggplus_parameters (10% dropout, 5% corrupt); each n in a fresh process
    for its peak RSS. Baselines from the same run: the n = 10^3 round scaled linearly, and the 2k
    X25519 key agreements per client (channel keys and pairwise masks) timed as bare library calls.

(h) --comm: bytes per client per round, counted by the transport (SecAggResult.communication), SecAgg+
    k = 32, t = 17, active mode, 10% dropout after masking, d = 100: download and upload at n = 10^2, 3*10^2,
    10^3 measured (--comm-ns to change, e.g. 100,1000,10000), and at n = 10^6 computed from the counted
    sizes: per stage, the mean download is fitted exactly as a + b n + c log2 n (a + b n with two sizes),
    the form of every message size of the protocol, and evaluated at 10^6. Target <= 16 KB, flat in n.
(i) --upload: upload per client against the raw vector ceil(d bits / 8), d = 10^5, 20 bits, n = 50, k = 32,
    t = 17 (target <= 1.05 raw + O(k)); the masked-input message alone against the raw vector.
(j) --memory: peak RSS of one round in a fresh process (run_secagg_round, SecAgg+ k = 32, t = 17, 10% dropout
    after masking), n = 10^4, d = 10^3 and n = 100, d = 10^6 (targets 300 MB and 1.5 GB); --memory-cases
    to change, e.g. 100x1000000. Baseline: the process's RSS before the round (libraries + the inputs).
(k) --cpu: client CPU per client in one round (n = 10^3 or --cpu-n, d = 10^3, k = 32, t = 17, active) against
    the floor of its cryptography timed as bare library calls in the same run: 2 X25519 key pairs + 2k
    agreements, 2 Ed25519 signatures + k + t verifications, k AES-GCM seals + k opens of a share box (one key
    schedule per neighbour's channel key, as each neighbour has its own), and
    k + 1 AES-CTR mask expansions of d words plus one add each (target <= 2x). The round runs twice, as
    run_secagg_round runs it: with every client in this process (workers=1; clients' CPU = their part of each
    stage) and with the default pool (protocols.procpool.client_pool: one forked worker per usable core;
    clients' CPU = the workers' process CPU serving them); both must give the same sum and bytes. The ratio
    against the target is a client's own code, the CPU inside SecAggClient.receive in whichever process holds
    it; the CPU of the serving around it (reading the server's per-client downlinks, which the simulator builds
    next to the clients, and the pool's dispatch) is printed beside it. Printed: each round's wall time, the
    speed-up, and the wall time against n x floor / cores.
--wire runs (h), (i) and (k) at their default sizes (under 2 minutes on an idle 2-core machine).

Run: python benchmarks/bench_secagg.py [--quick | --scale | --wire | --comm | --upload | --memory | --cpu]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from protocols import run_secagg_round, secaggplus_parameters
from secagg_dp.crypto import masking, prg, shamir


def best(fn, repeat=5):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def raw_keystream_add(acc: np.ndarray, seed: bytes) -> None:
    """Baseline: the keystream of the same bytes in one call, viewed as uint32, plus one numpy add."""
    ks = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor().update(bytes(4 * acc.size))
    np.add(acc, np.frombuffer(ks, dtype="<u4"), out=acc)


def bench_a(d=10**6):
    seed = os.urandom(32)
    acc = np.zeros(d, dtype=np.uint32)
    base = best(lambda: raw_keystream_add(acc, seed))
    ours = best(lambda: prg.expand_mask(seed, d, 32))
    fused = best(lambda: prg.accumulate_mask(acc, seed, 32))
    print(
        f"(a) d={d:,} Z_2^32: expand_mask {ours * 1e3:.2f} ms, accumulate_mask {fused * 1e3:.2f} ms; "
        f"baseline keystream+add {base * 1e3:.2f} ms; ratios {ours / base:.2f} / {fused / base:.2f} (target <= 1.5)"
    )


def bench_b(d=10**5, ks=(2, 5, 10, 25, 50, 100)):
    x = np.random.default_rng(0).integers(0, 1 << 32, size=d, dtype=np.uint64)
    for k in ks:
        seeds = [os.urandom(32) for _ in range(k + 1)]
        acc = np.zeros(d, dtype=np.uint32)
        base = best(lambda acc=acc, seeds=seeds: [raw_keystream_add(acc, s) for s in seeds], repeat=3)
        pairs = [(s, 1 if i % 2 else -1) for i, s in enumerate(seeds[1:])]
        ours = best(
            lambda seeds=seeds, pairs=pairs: masking.mask_input(x, bits=32, self_seed=seeds[0], pairwise=pairs),
            repeat=3,
        )
        print(
            f"(b) k={k:3d} d={d:,}: mask_input {ours * 1e3:7.2f} ms vs (k+1)(keystream+add) {base * 1e3:7.2f} ms; "
            f"ratio {ours / base:.2f} (target <= 1.5)"
        )


def bench_c(t=51, n=100):
    secret = os.urandom(32)
    pts = np.arange(1, n + 1)
    sh = shamir.share([secret], threshold=t, points=pts)
    s_time = best(lambda: shamir.share([secret], threshold=t, points=pts), repeat=20)
    sel = pts[n - t :] - 1

    def rec():
        shamir.lagrange_at_zero.cache_clear()  # uncached: the worst case
        assert shamir.decode(shamir.reconstruct(pts[sel], sh[sel], threshold=t)) == secret

    r_time = best(rec, repeat=20)
    r_cached = best(lambda: shamir.reconstruct(pts[sel], sh[sel], threshold=t), repeat=20)
    print(
        f"(c) Shamir 32-byte secret t={t} n={n}: share {s_time * 1e3:.2f} ms, reconstruct {r_time * 1e3:.2f} ms "
        f"(cached coefficients {r_cached * 1e3:.2f} ms); target <= 10 ms each"
    )


def round_figures(label, n, d, t, k, drop_frac=0.1, security="active", quiet=False):
    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << 32, size=d, dtype=np.uint64) for i in range(n)}
    gone = set(range(0, n, int(round(1 / drop_frac))))
    t0 = time.perf_counter()
    res = run_secagg_round(
        inputs,
        bits=32,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": gone},
        seed=1,
        security=security,
        round_id=bytes(16),
    )
    total = time.perf_counter() - t0
    expect = np.zeros(d, dtype=np.uint64)
    for c in res.survivors:
        expect += inputs[c]
    assert np.array_equal(res.aggregate, expect & np.uint64(0xFFFFFFFF))
    if not quiet:
        stages = ", ".join(f"{s}={v:.2f}s" for s, v in res.timings.items())
        print(
            f"{label} n={n} d={d:,} t={t} k={k}: total {total:.2f} s (all clients + server, one process)\n    {stages}"
        )
    return total, res.timings


def mode_cost(label, n, d, t, k, repeat=2):
    """Same round in both modes, interleaved ``repeat`` times; best of each. Prints the active mode's extra
    cost per round (all n clients and the server run sequentially in one process) and per client."""
    runs = {"semi-honest": [], "active": []}
    for _ in range(repeat):
        for mode in runs:
            runs[mode].append(round_figures(label, n, d, t, k, security=mode, quiet=True))
    (semi, _), (act, timings) = min(runs["semi-honest"], key=lambda r: r[0]), min(runs["active"], key=lambda r: r[0])
    cons = timings.get("consistency:clients", 0.0) + timings.get("consistency:server", 0.0)
    keys = timings.get("share_keys:clients", 0.0)  # includes verifying every roster entry used
    print(
        f"{label} n={n} d={d:,} t={t} k={k}: active {act:.2f} s vs semi-honest {semi:.2f} s per round; "
        f"extra {act - semi:+.2f} s = {(act - semi) / n * 1e3:+.1f} ms per client, ratio {act / semi:.2f}\n"
        f"    active: consistency round {cons:.2f} s, share_keys incl. roster signature checks {keys:.2f} s"
    )


def scale_one(n: int, d: int = 10**3) -> dict:
    """(g), one n, in this process: time exactly run_secagg_round; peak RSS of the process afterwards."""
    k, t = secaggplus_parameters(n, dropout_fraction=0.1, corrupt_fraction=0.05)
    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << 32, size=d, dtype=np.uint64) for i in range(n)}
    gone = set(range(0, n, 10))
    shamir.field()  # one-time GF(65537) table construction, excluded
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB; libraries + inputs
    t0 = time.perf_counter()
    res = run_secagg_round(
        inputs,
        bits=32,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": gone},
        seed=1,
        round_id=bytes(16),
        workers=1,  # one process: its time and its peak RSS are the whole round's
    )
    secs = time.perf_counter() - t0
    expect = np.zeros(d, dtype=np.uint64)
    for c in res.survivors:
        expect += inputs[c]
    assert np.array_equal(res.aggregate, expect & np.uint64(0xFFFFFFFF))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return {
        "n": n,
        "d": d,
        "k": k,
        "t": t,
        "seconds": secs,
        "rss": rss,
        "rss_before": rss0,
        "inputs_bytes": n * d * 8,
        "timings": dict(res.timings),
    }


def x25519_seconds(count: int = 4000) -> float:
    """Seconds per bare X25519 exchange (cryptography, public key parsed each time as the protocol does)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey

    sk = X25519PrivateKey.generate()
    pk = X25519PrivateKey.generate().public_key().public_bytes_raw()
    return best(lambda: [sk.exchange(X25519PublicKey.from_public_bytes(pk)) for _ in range(count)], repeat=3) / count


def bench_scale(ns=(10**3, 10**4)):
    out = {}
    for n in ns:
        proc = subprocess.run(
            [sys.executable, __file__, "--scale-one", str(n)], capture_output=True, text=True, check=True
        )
        out[n] = json.loads(proc.stdout.strip().splitlines()[-1])
    per_x = x25519_seconds()
    base = out[ns[0]]
    for n, r in out.items():
        floor = 2 * r["k"] * n * per_x
        lin = base["seconds"] * n / base["n"]
        print(
            f"(g) SecAgg+ active n={n:,} d={r['d']:,} (k, t)=({r['k']}, {r['t']}): {r['seconds']:.1f} s per round, "
            f"peak RSS {r['rss'] / 2**20:,.0f} MiB ({r['rss_before'] / 2**20:,.0f} MiB before the round: libraries + "
            f"inputs of {r['inputs_bytes'] / 2**20:,.0f} MiB)\n"
            f"    vs n={base['n']:,} scaled linearly {lin:.1f} s: ratio {r['seconds'] / lin:.2f}; "
            f"vs 2kn bare X25519 exchanges {floor:.1f} s ({per_x * 1e6:.0f} us each): "
            f"ratio {r['seconds'] / floor:.2f}\n"
            "    " + ", ".join(f"{s}={v:.1f}s" for s, v in r["timings"].items())
        )


COMM_K, COMM_T = 32, 17  # SecAgg+ degree and threshold of (h)-(k): the least t > (k + 1)/2 active mode accepts


def comm_round(n: int, d: int, bits: int = 20, k: int = COMM_K, t: int = COMM_T, workers: int | None = None):
    """One active SecAgg+ round with 10% dropout after masking; its ``SecAggResult`` (sum checked)."""
    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << bits, size=d, dtype=np.uint64) for i in range(n)}
    res = run_secagg_round(
        inputs,
        bits=bits,
        threshold=t,
        neighbours=k,
        dropouts={"masked_input": set(range(0, n, 10))},
        seed=1,
        round_id=bytes(16),
        workers=workers,
    )
    expect = np.zeros(d, dtype=np.uint64)
    for c in res.survivors:
        expect += inputs[c]
    assert np.array_equal(res.aggregate, expect & np.uint64((1 << bits) - 1))
    return res


def extrapolate(ns, values, at: float) -> tuple[float, str]:
    """A stage's mean bytes per client (one value per n in ``ns``) at ``at`` clients, and the model used.

    Every message size of the protocol is a + b n (a broadcast roster or survivor list), a + c log2 n (a
    membership proof) or a constant (keys, boxes, masked input) in n. Within a noise floor (the spread
    over the sizes is at most 5 % of the largest value, or 256 B: the neighbourhood's dropouts and signer
    cover vary a little with n) the stage is constant; otherwise whichever of the two one-term models fits
    the points better (least squares; the linear one, an upper bound, with only two sizes).
    """
    ns, vals = np.asarray(ns, dtype=float), np.asarray(values, dtype=float)
    if vals.max() - vals.min() <= max(0.05 * vals.max(), 256.0):
        return float(vals[-1]), "constant"
    fits = []
    for name, x in (("a + b n", ns), ("a + c log2 n", np.log2(ns))):
        coef, *_ = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), vals, rcond=None)
        rss = float(np.sum((coef[0] + coef[1] * x - vals) ** 2))
        fits.append((rss if len(ns) > 2 else (name != "a + b n"), name, coef))
    _, name, coef = min(fits, key=lambda f: f[0])
    x = at if name == "a + b n" else np.log2(at)
    return max(float(coef[0] + max(coef[1], 0.0) * x), float(vals[-1])), name


def bench_comm(ns=(100, 300, 1000), d: int = 100, at: int = 10**6) -> None:
    """(h) bytes per client per round at k = 32 for each n; download at n = ``at`` computed from the sizes."""
    per_stage: dict[str, list[float]] = {}
    rows = []
    for n in ns:
        t0 = time.perf_counter()
        comm = comm_round(n, d).communication
        s = comm.summary()
        rows.append((n, s, time.perf_counter() - t0))
        for stage, v in s["stages"].items():
            per_stage.setdefault(stage, []).append(v["download_bytes_mean"])
        print(
            f"(h) SecAgg+ k={COMM_K} active n={n:,} d={d}: download {s['download_bytes_mean'] / 1e3:.2f} kB mean, "
            f"{s['download_bytes_max'] / 1e3:.2f} kB max; upload {s['upload_bytes_mean'] / 1e3:.2f} kB mean "
            f"(round {rows[-1][2]:.1f} s)\n    download per stage: "
            + ", ".join(f"{st}={v['download_bytes_mean'] / 1e3:.2f} kB" for st, v in s["stages"].items())
        )
    big = {st: extrapolate(ns, v, at) for st, v in per_stage.items()}
    total = sum(v for v, _ in big.values())
    first, last = rows[0][1]["download_bytes_mean"], rows[-1][1]["download_bytes_mean"]
    print(
        f"(h) download at n={at:,} computed from the counted sizes (per stage, model fitted over n = "
        f"{', '.join(f'{n:,}' for n in ns)}): {total / 1e3:,.1f} kB (target <= 16 kB: "
        f"{'met' if total <= 16e3 else 'NOT met'}); n={ns[-1]:,} / n={ns[0]:,}: ratio {last / first:.2f} "
        "(flat: ~1)\n    " + ", ".join(f"{st}={v / 1e3:,.1f} kB ({model})" for st, (v, model) in big.items())
    )


def bench_upload(n: int = 50, d: int = 10**5, bits: int = 20) -> None:
    """(i) upload per client against the raw vector at ``bits`` bits."""
    comm = comm_round(n, d, bits=bits).communication
    raw = -(-d * bits // 8)
    survivors = comm.upload[:, comm.stages.index("masked_input")] > 0
    up = comm.upload_bytes[survivors]
    masked = comm.upload[survivors, comm.stages.index("masked_input")]
    rest = up - masked
    print(
        f"(i) upload per client, n={n} d={d:,} {bits} bits k={COMM_K}: {up.max() / 1e3:,.1f} kB max = "
        f"{up.max() / raw:.3f}x raw ({raw / 1e3:,.1f} kB; target <= 1.05x + O(k)); masked input alone "
        f"{masked.max() / raw:.3f}x raw; the other messages {rest.max() / 1e3:.1f} kB = {rest.max() / COMM_K:.0f} B "
        "per neighbour"
    )


def memory_one(n: int, d: int) -> dict:
    """(j), one case, in this process: peak RSS of one round (inputs built before the round)."""
    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << 20, size=d, dtype=np.uint64) for i in range(n)}
    shamir.field()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    t0 = time.perf_counter()
    res = run_secagg_round(
        inputs,
        bits=20,
        threshold=COMM_T,
        neighbours=COMM_K,
        dropouts={"masked_input": set(range(0, n, 10))},
        seed=1,
        round_id=bytes(16),
        workers=1,  # one process: its peak RSS is the whole round's
    )
    secs = time.perf_counter() - t0
    assert len(res.survivors) == n - len(range(0, n, 10))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"n": n, "d": d, "seconds": secs, "rss": rss, "rss_before": rss0, "inputs_bytes": n * d * 8}


def bench_memory(cases=((10**4, 10**3), (100, 10**6))) -> None:
    """(j) each case in a fresh process."""
    for n, d in cases:
        proc = subprocess.run(
            [sys.executable, __file__, "--memory-one", f"{n}x{d}"], capture_output=True, text=True, check=True
        )
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        packed = n * -(-d * 20 // 8)
        print(
            f"(j) peak RSS n={n:,} d={d:,} (k={COMM_K}, 20 bits): {r['rss'] / 2**20:,.0f} MiB "
            f"({r['rss'] / 1e6:,.0f} MB; round {r['seconds']:.1f} s) vs {r['rss_before'] / 2**20:,.0f} MiB before "
            f"the round (libraries + uint64 inputs of {r['inputs_bytes'] / 2**20:,.0f} MiB); "
            f"{r['rss'] / r['inputs_bytes']:.1f}x the uint64 inputs, {r['rss'] / packed:.1f}x the packed inputs"
        )


def crypto_floor_seconds(k: int, t: int, d: int, bits: int = 20) -> dict[str, float]:
    """Seconds of the bare library calls one active SecAgg+ client must make (see (k) in the docstring)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from protocols.messages import SharePlaintext

    peers = [X25519PrivateKey.generate().public_key().public_bytes_raw() for _ in range(k)]
    ed = Ed25519PrivateKey.generate()
    pub = ed.public_key()
    sig = ed.sign(b"x" * 64)
    channel_keys = [os.urandom(32) for _ in range(k)]  # one AES-GCM key per neighbour: k key schedules
    nonce, plain = os.urandom(12), os.urandom(SharePlaintext.LEN)
    boxes = [AESGCM(key).encrypt(nonce, plain, b"ad") for key in channel_keys]
    seeds = [os.urandom(32) for _ in range(k + 1)]
    acc = np.zeros(d, dtype=np.uint32)

    def x25519():
        own = [X25519PrivateKey.generate() for _ in range(2)]
        for p in peers:
            for sk in own:
                sk.exchange(X25519PublicKey.from_public_bytes(p))

    def ed25519_sign():
        for _ in range(2):
            ed.sign(b"x" * 64)

    def ed25519_verify():
        for _ in range(k + t):
            pub.verify(sig, b"x" * 64)

    def aes_gcm():
        for key, box in zip(channel_keys, boxes, strict=True):  # seal to and open from each neighbour
            gcm = AESGCM(key)
            gcm.encrypt(nonce, plain, b"ad")
            gcm.decrypt(nonce, box, b"ad")

    def aes_ctr():
        for s in seeds:
            raw_keystream_add(acc, s)

    return {
        name: best(fn, repeat=5)
        for name, fn in (
            ("X25519", x25519),
            ("Ed25519 sign", ed25519_sign),
            ("Ed25519 verify", ed25519_verify),
            ("AES-GCM", aes_gcm),
            ("AES-CTR", aes_ctr),
        )
    }


def pooled_round(n: int, d: int, workers: int | None, bits: int = 20) -> dict:
    """(k), one round as ``run_secagg_round`` runs it (``client_pool(inputs, workers)``, then
    ``run_pooled_round``; None: the default pool), timed: wall seconds of the round, CPU seconds of this process
    (server, transport, building the downlinks, talking to the workers) and of the clients (in a process pool,
    the workers' CPU serving them; in-process, this process's CPU handing the stages' messages to the clients,
    which includes building the per-client downlinks). Sum and bytes checked."""
    from protocols import run_pooled_round
    from protocols.procpool import ProcessClientPool, client_pool

    rng = np.random.default_rng(1)
    inputs = {i: rng.integers(0, 1 << bits, size=d, dtype=np.uint64) for i in range(n)}
    gone = set(range(0, n, 10))
    own = _timed_receive()  # installed before the pool forks: the workers inherit it
    t0, c0 = time.perf_counter(), time.process_time()
    pool = client_pool(inputs, workers)
    procs = pool.workers if isinstance(pool, ProcessClientPool) else 1
    spent = [0.0]  # in-process: this process's CPU inside the pool's deliver (the clients' work)
    if procs == 1:
        inner = pool.deliver

        def deliver(stage, envelopes):
            c = time.process_time()
            try:
                return inner(stage, envelopes)
            finally:
                spent[0] += time.process_time() - c

        pool.deliver = deliver
    try:
        res = run_pooled_round(
            pool,
            sorted(inputs),
            d,
            bits=bits,
            threshold=COMM_T,
            neighbours=COMM_K,
            dropouts={"masked_input": gone},
            seed=1,
            round_id=bytes(16),
        )
    finally:
        pool.close()
        own.restore()
    wall, driver = time.perf_counter() - t0, time.process_time() - c0
    expect = np.zeros(d, dtype=np.uint64)
    for c in res.survivors:
        expect += inputs[c]
    assert np.array_equal(res.aggregate, expect & np.uint64((1 << bits) - 1))
    if procs > 1:
        clients = sum(pool.cpu.values())
    else:  # CPU, not wall time: a loaded machine stretches the stage timings, not the CPU a client needs
        clients = spent[0]
        driver -= clients
    digest = hashlib.sha256(res.aggregate.tobytes() + res.communication.upload.tobytes()).hexdigest()
    return {
        "wall": wall,
        "driver": driver,
        "clients": clients,
        "own": own.seconds(),
        "own_verify": own.verify_seconds(),
        "workers": procs,
        "digest": digest,
    }


class _timed_receive:  # noqa: N801  (used as a function: installs itself)
    """CPU seconds inside ``SecAggClient.receive`` (a client's own code: parse, check, compute, sign, reply),
    summed over every process holding clients, and the part of it spent in Ed25519 verifications
    (``secagg_dp.crypto.signing.verify``, called by the registry when its memo of verified signatures misses):
    the wrappers are installed before a pool forks, so the workers inherit them, and add each call's
    ``process_time`` to shared doubles. What the first leaves out of the pool's CPU is the serving around the
    clients: reading the per-client downlinks (roster slices with their membership proofs, share bundles,
    survivor lists, unmask requests), which in the simulator are built next to the clients to save transfers
    but are the server's messages in a deployment, and the pool's own dispatch. The second matters for the
    comparison with the floor without verifications: in one process the server's checks fill the shared
    memo first, so the clients verify nothing, while a worker verifies each signature its shard meets once."""

    def __init__(self) -> None:
        import multiprocessing

        from protocols.client import SecAggClient
        from secagg_dp.crypto import signing

        ctx = multiprocessing.get_context("fork")
        self._cls, self._orig = SecAggClient, SecAggClient.receive
        self._signing, self._orig_verify = signing, signing.verify
        self._total, self._verify = ctx.Value("d", 0.0), ctx.Value("d", 0.0)
        orig, total, orig_verify, in_verify = self._orig, self._total, self._orig_verify, self._verify
        inside = [False]  # in this process, within a client's receive (the server's own checks not counted)

        def receive(client, data):  # noqa: ANN001, ANN202
            c = time.process_time()
            inside[0] = True
            try:
                return orig(client, data)
            finally:
                inside[0] = False
                spent = time.process_time() - c
                with total.get_lock():
                    total.value += spent

        def verify(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            if not inside[0]:
                return orig_verify(*args, **kwargs)
            c = time.process_time()
            try:
                return orig_verify(*args, **kwargs)
            finally:
                spent = time.process_time() - c
                with in_verify.get_lock():
                    in_verify.value += spent

        SecAggClient.receive = receive
        signing.verify = verify

    def seconds(self) -> float:
        return float(self._total.value)

    def verify_seconds(self) -> float:
        return float(self._verify.value)

    def restore(self) -> None:
        self._cls.receive = self._orig
        self._signing.verify = self._orig_verify


def bench_cpu(n: int = 1000, d: int = 10**3) -> None:
    """(k) client CPU per client in one round against the floor of its cryptography, same run; the round's
    wall time with the clients in worker processes (the default) against one process."""
    from protocols.procpool import usable_cores

    # the floor is timed before, between and after the two rounds and each item's fastest time kept: on a
    # shared machine the speed drifts by tens of percent over a minute, and the fastest floor gives the
    # largest (least flattering) ratio
    floors = [crypto_floor_seconds(COMM_K, COMM_T, d)]
    one = pooled_round(n, d, workers=1)
    floors.append(crypto_floor_seconds(COMM_K, COMM_T, d))
    many = pooled_round(n, d, workers=None)
    floors.append(crypto_floor_seconds(COMM_K, COMM_T, d))
    floor = {name: min(f[name] for f in floors) for name in floors[0]}
    total = sum(floor.values())
    local = total - floor["Ed25519 verify"]
    assert one["digest"] == many["digest"], "the pooled round differs from the in-process one"
    cores = usable_cores()
    print(
        f"(k) CPU per client, n={n:,} d={d:,} k={COMM_K} t={COMM_T} active, floor of a client's cryptography "
        f"{total * 1e3:.2f} ms ({local * 1e3:.2f} ms without its k + t signature verifications, which simulated "
        "clients sharing a process share through one memoising KeyRegistry)\n"
        "    floor (fastest of three timings: before, between and after the rounds): "
        + ", ".join(f"{name} {v * 1e3:.2f} ms" for name, v in floor.items())
        + "; without verifications the three gave "
        + ", ".join(f"{(sum(f.values()) - f['Ed25519 verify']) * 1e3:.2f}" for f in floors)
        + " ms"
    )
    for label, r in (("one process", one), (f"{many['workers']} worker processes (default)", many)):
        per, own, ver = r["clients"] / n, r["own"] / n, r["own_verify"] / n
        print(
            f"    {label}: round {r['wall']:.1f} s wall; a client's own code (SecAggClient.receive) {own * 1e3:.2f} ms "
            f"CPU per client, ratio {own / total:.2f} to the full floor; of it {ver * 1e3:.2f} ms Ed25519 "
            f"verifications, the rest {(own - ver) * 1e3:.2f} ms: {(own - ver) / local:.2f}x the floor without "
            f"verifications (target <= 2); with the serving around it (reading the server's per-client "
            f"downlinks, dispatch) {per * 1e3:.2f} ms; driver (server, transport, pool) "
            f"{r['driver'] / n * 1e3:.2f} ms per client"
        )
    print(
        f"    wall time with {many['workers']} worker processes ({cores} usable cores): {many['wall']:.1f} s against "
        f"{one['wall']:.1f} s in one process (speed-up {one['wall'] / many['wall']:.2f}x; the same round bit for "
        f"bit); against n x floor without verifications / cores = {n * local / cores:.1f} s: ratio "
        f"{many['wall'] / (n * local / cores):.2f}"
    )
    for size in (10**4, 10**6):
        ours, before = ring_layout_seconds(size)
        print(
            f"    ring layout per client at n={size:,}: {ours * 1e3:.2f} ms ({ours / local:.2f}x the floor without "
            f"verifications) against {before * 1e3:.1f} ms for n AES blocks and a sort (ratio {before / ours:.0f}x)"
        )


def ring_layout_seconds(n: int, k: int = COMM_K) -> tuple[float, float]:
    """One client's ring layout at roster size n: ours (pi of its leaf, pi^-1 of its k neighbour offsets and
    of its 2k + 1 two-hop positions; secagg_dp.crypto.prp) against the previous layout, n AES-CTR key
    blocks and a sort (what a client without a shared cache had to do), timed in the same run."""
    from secagg_dp.crypto.prp import FeistelPermutation

    seed = os.urandom(32)
    offsets = np.array([d for j in range(1, k // 2 + 1) for d in (j, -j)])

    def ours():
        perm = FeistelPermutation(n, seed)
        me = int(perm.forward([12345 % n])[0])
        perm.inverse((me + offsets) % n)
        perm.inverse((me + np.arange(-k, k + 1)) % n)

    def before():
        keys = np.frombuffer(prg.keystream(seed, 16 * n), dtype="<u8").reshape(-1, 2)
        np.lexsort((keys[:, 1], keys[:, 0]))

    return best(ours), best(before, repeat=2)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(float(x)) for x in text.split(",") if x)


def _cases(text: str) -> tuple[tuple[int, int], ...]:
    return tuple(tuple(int(float(v)) for v in c.split("x")) for c in text.split(",") if c)  # type: ignore[misc]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip (e); (f) at n = 1000 with d = 10^3")
    ap.add_argument("--scale", action="store_true", help="only (g): one round at n = 10^3 and 10^4, d = 10^3")
    ap.add_argument("--scale-one", type=int, metavar="N", help=argparse.SUPPRESS)  # child process of --scale
    ap.add_argument("--wire", action="store_true", help="(h), (i) and (k) at their default sizes")
    ap.add_argument("--comm", action="store_true", help="only (h): download/upload bytes per client against n")
    ap.add_argument("--comm-ns", type=_ints, default=(100, 300, 1000), metavar="N,N,...", help="sizes of (h)")
    ap.add_argument("--upload", action="store_true", help="only (i): upload against the raw vector, d = 10^5")
    ap.add_argument("--memory", action="store_true", help="only (j): peak RSS of one round per case")
    ap.add_argument(
        "--memory-cases", type=_cases, default=((10**4, 10**3), (100, 10**6)), metavar="NxD,...", help="cases of (j)"
    )
    ap.add_argument("--memory-one", type=_cases, help=argparse.SUPPRESS)  # child process of --memory
    ap.add_argument("--cpu", action="store_true", help="only (k): client CPU against its cryptography")
    ap.add_argument("--cpu-n", type=int, default=1000, metavar="N", help="clients of (k)")
    args = ap.parse_args(argv)
    if args.scale_one:
        print(json.dumps(scale_one(args.scale_one)))
        return
    if args.memory_one:
        print(json.dumps(memory_one(*args.memory_one[0])))
        return
    if args.scale:
        bench_scale()
        return
    picked = [args.comm or args.wire, args.upload or args.wire, args.cpu or args.wire, args.memory]
    if any(picked):
        shamir.field()  # one-time GF(65537) table construction, excluded from timings
        if picked[0]:
            bench_comm(args.comm_ns)
        if picked[1]:
            bench_upload()
        if picked[2]:
            bench_cpu(args.cpu_n)
        if picked[3]:
            bench_memory(args.memory_cases)
        return
    shamir.field()  # one-time GF(65537) table construction, excluded from timings
    run_secagg_round({i: np.zeros(4, np.uint64) for i in range(4)}, bits=32, threshold=3, seed=0)  # warm-up
    bench_a()
    bench_b()
    bench_c()
    full, _ = round_figures("(d) full graph", 100, 10**5, 67, None)
    plus, _ = round_figures("(d) SecAgg+  ", 100, 10**5, 9, 15)
    print(f"    targets: full <= 5 s ({full:.2f}), k=15 <= 1.5 s ({plus:.2f})")
    k, t = secaggplus_parameters(1000, dropout_fraction=0.1, corrupt_fraction=0.05)
    if not args.quick:
        round_figures("(e) SecAgg+  ", 1000, 10**4, t, k)
    mode_cost("(f) full graph", 100, 10**5, 67, None)
    mode_cost("(f) SecAgg+  ", 1000, 10**3 if args.quick else 10**4, t, k, repeat=1 if args.quick else 2)


if __name__ == "__main__":
    main()
