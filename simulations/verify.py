"""Randomized end-to-end checks of the codec and Z_q arithmetic, printed as a table.

Each check is a function ``check(*, seed: int, trials: int) -> list[Row]`` with
``Row = (name, params, passed, detail)``; :data:`CHECKS` lists them in run order, so another check (e.g. the
protocol and dropout checks of ``simulations.verify_protocol``) is added with one line appended to it.
Oracles are independent of the code under test: Python big integers for every modular sum, and the plain
float64 sum of the clipped inputs for decoding. Exit code 0 iff every row passed.

The command ``secagg-dp verify`` (:mod:`simulations.cli.verify`) runs them. Heavy imports (numpy, the
library) happen inside the check functions so ``secagg-dp --help`` stays fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "Row",
    "CHECKS",
    "check_end_to_end",
    "check_modular_sum_exact",
    "check_encode_exact",
    "check_wrap_edges",
    "check_rotation",
    "check_l2_bound",
    "check_protocol",
    "run_checks",
    "format_table",
]

Row = tuple[str, dict[str, Any], bool, str]
CheckFn = Callable[..., Iterable[Row]]

_BITS = (1, 8, 31, 32, 33, 53, 54, 61, 62)


def _py_lift(v: int, q: int) -> int:
    """Centred representative of v mod q in [−q/2, q/2), with Python ints (oracle)."""
    return ((v + q // 2) % q) - q // 2


def check_end_to_end(*, seed: int, trials: int) -> list[Row]:
    """clip → encode → discrete Gaussian noise → modular sum over many clients → decode, vs the plain sum.

    Passes when (1) the centred lift of the uint64 modular sum equals the Python-int sum exactly, (2) no
    coordinate wrapped, and (3) ‖decoded − Σ clip(x_i)‖₂ ≤ (n√d + ‖Σ z_i‖₂)/s (ZqCodec.decode_error_bound).
    """
    import numpy as np

    from secagg_dp.noise import SIGMA_MAX, sample_discrete_gaussian
    from secagg_dp.quantize import ZqCodec, clip_l2
    from secagg_dp.zq import centered, sum_mod

    configs = ((16, 1000, 20, 1.0, 0.02), (24, 20_000, 10, 0.5, 0.01), (62, 500, 100, 2.0, 1e-3))
    rows: list[Row] = []
    for t in range(trials):
        for i, (bits, n, dim, clip, sigma) in enumerate(configs):
            rseed = seed * 1_000_003 + t * 101 + i
            rng = np.random.default_rng(rseed)
            q = 1 << bits
            s = ZqCodec.scale_for(bits=bits, n_clients=n, clip=clip, dim=dim, sigma=sigma, k=7.0)
            s = min(s, SIGMA_MAX / sigma)  # the sampler accepts grid std s·σ ≤ SIGMA_MAX
            codec = ZqCodec(dim, bits, clip, s, rotation_seed=rseed)
            x = rng.normal(size=(n, dim)) * rng.choice([0.05, 1.0, 10.0])
            z = sample_discrete_gaussian(s * sigma, (n, codec.padded_dim), rng=rng)
            xq = codec.quantize(x, rng=np.random.default_rng(rseed + 1))
            enc = codec.encode(x, noise=z, rng=np.random.default_rng(rseed + 1))  # same rounding draws
            agg = sum_mod(enc, bits)
            exact = (xq.astype(object) + z.astype(object)).sum(axis=0)  # Python ints: the oracle
            lift_ok = [int(v) for v in centered(agg, bits)] == [_py_lift(int(v), q) for v in exact]
            wrapped = sum(1 for v in exact if not -(q // 2) <= v < q // 2)
            decoded = codec.decode(agg)
            truth = clip_l2(x, clip).sum(axis=0)
            err = float(np.linalg.norm(decoded - truth))
            bound = codec.decode_error_bound(n, float(np.linalg.norm(z.sum(axis=0))))
            ok = lift_ok and wrapped == 0 and err <= bound * (1 + 1e-9) + 1e-9
            rel = err / max(float(np.linalg.norm(truth)), 1e-300)
            wb = codec.wrap_bound(n, sigma).any_coordinate
            rows.append(
                (
                    "end-to-end encode/noise/sum/decode",
                    {"bits": bits, "n": n, "dim": dim, "clip": clip, "sigma": sigma, "seed": rseed},
                    ok,
                    f"‖err‖={err:.3g} ≤ {bound:.3g} (rel {rel:.1e}); lift exact={lift_ok}; "
                    f"wrapped={wrapped} (P≤{wb:.1e})",
                )
            )
    return rows


def check_modular_sum_exact(*, seed: int, trials: int) -> list[Row]:
    """zq.sum_mod over many uint64 residue vectors (incl. all q−1 and q/2 rows) vs Python big-int sums."""
    import numpy as np

    from secagg_dp.zq import sum_mod

    rows: list[Row] = []
    for t in range(trials):
        for bits in _BITS:
            rng = np.random.default_rng([seed, t, bits])
            q = 1 << bits
            n, dim = 300, 16
            a = rng.integers(0, q, size=(n, dim), dtype=np.uint64)
            a[::3] = q - 1  # force many wraps of the uint64 accumulator and of Z_q
            a[1::7] = q // 2
            want = [sum(col) % q for col in zip(*a.tolist(), strict=True)]
            got_stack = sum_mod(a, bits).tolist()
            got_iter = sum_mod(list(a), bits).tolist()
            ok = got_stack == want and got_iter == want
            rows.append(
                (
                    "modular sum bit-exact",
                    {"bits": bits, "n": n, "dim": dim, "trial": t},
                    ok,
                    "equal to Python-int sum" if ok else "MISMATCH with Python-int sum",
                )
            )
    return rows


def check_encode_exact(*, seed: int, trials: int) -> list[Row]:
    """encode = (x̃ + z) mod q bit for bit, with z spanning the full int64 range, and the aggregate's sum."""
    import numpy as np

    from secagg_dp.quantize import ZqCodec
    from secagg_dp.zq import sum_mod

    rows: list[Row] = []
    for t in range(trials):
        for bits in (1, 32, 53, 62):
            rng = np.random.default_rng([seed, t, bits, 7])
            q = 1 << bits
            n, dim = 50, 12
            codec = ZqCodec(
                dim, bits, 1.0, min(2.0 ** (bits + 2), 2.0**60), rotation_seed=int(rng.integers(2**62)), beta=0.0
            )
            x = rng.normal(size=(n, dim))
            z = rng.integers(-(2**63), 2**63 - 1, size=(n, codec.padded_dim), dtype=np.int64, endpoint=True)
            xq = codec.quantize(x, rng=np.random.default_rng(t))
            enc = codec.encode(x, noise=z, rng=np.random.default_rng(t))
            pairs = zip(xq.ravel().tolist(), z.ravel().tolist(), strict=True)
            per_ok = enc.ravel().tolist() == [(a + b) % q for a, b in pairs]
            want = [sum(c) % q for c in zip(*(xq.astype(object) + z.astype(object)).tolist(), strict=True)]
            sum_ok = sum_mod(enc, bits).tolist() == want
            rows.append(
                (
                    "encode + noise bit-exact",
                    {"bits": bits, "n": n, "noise": "full int64", "trial": t},
                    per_ok and sum_ok,
                    f"per-client exact={per_ok}; modular sum exact={sum_ok}",
                )
            )
    return rows


def check_wrap_edges(*, seed: int, trials: int) -> list[Row]:
    """Boundary residues lift to [−q/2, q/2); an overflowing sum decodes to its centred residue, exactly."""
    import numpy as np

    from secagg_dp.quantize import ZqCodec, rademacher_signs
    from secagg_dp.zq import centered, sum_mod

    rows: list[Row] = []
    for bits in (1, 2, 16, 32, 53, 62):
        q = 1 << bits
        codec = ZqCodec(1, bits, 1.0, 1.0, rotation_seed=seed, beta=0.0)
        sign = float(rademacher_signs(seed, 1)[0])  # d = 1: the rotation is multiplication by this sign
        cases = {0: 0, q // 2 - 1: q // 2 - 1, q // 2: -(q // 2), q - 1: -1}
        got = {r: float(codec.decode(np.array([r], dtype=np.uint64))[0]) * sign for r in cases}
        lift_ok = all(got[r] == float(v) for r, v in cases.items())
        # Deliberate overflow: n large encodings whose integer sum leaves [−q/2, q/2).
        rng = np.random.default_rng([seed, bits])
        n, dim = 64, 8
        big = ZqCodec(dim, bits, 1.0, min(2.0 ** (bits - 2), 2.0**60) + 1.0, rotation_seed=seed, beta=0.0)
        x = rng.normal(size=(n, dim)) + 3.0
        xq = big.quantize(x, rng=np.random.default_rng(trials))
        enc = big.encode(x, rng=np.random.default_rng(trials))
        exact = xq.astype(object).sum(axis=0).tolist()
        lifted = [int(v) for v in centered(sum_mod(enc, bits), bits)]
        wrap_ok = lifted == [_py_lift(v, q) for v in exact]
        n_wrapped = sum(1 for v in exact if not -(q // 2) <= v < q // 2)
        ok = lift_ok and wrap_ok and n_wrapped > 0
        rows.append(
            (
                "wrap-around edges",
                {"bits": bits, "n": n, "dim": dim},
                ok,
                f"boundary lifts ok={lift_ok}; {n_wrapped}/{big.padded_dim} coords wrapped, "
                f"decode = centred residue: {wrap_ok}",
            )
        )
    return rows


def check_rotation(*, seed: int, trials: int) -> list[Row]:
    """Randomized Hadamard rotation: inverse to 1e-9 and norm preserved (orthogonality)."""
    import numpy as np

    from secagg_dp.quantize import ZqCodec

    rows: list[Row] = []
    for dim in (1, 3, 1000, 1 << 16):
        rng = np.random.default_rng([seed, dim])
        codec = ZqCodec(dim, 32, 1.0, 1.0, rotation_seed=int(rng.integers(2**62)))
        x = rng.normal(size=(max(1, trials), dim)) * 100
        y = codec.rotate(x)
        inv = float(np.max(np.abs(codec.unrotate(y) - x)))
        norm = float(np.max(np.abs(np.linalg.norm(y, axis=1) / np.linalg.norm(x, axis=1) - 1)))
        ok = inv <= 1e-9 and norm <= 1e-12
        rows.append(
            (
                "rotation inverse/orthogonal",
                {"dim": dim, "padded": codec.padded_dim},
                ok,
                f"max|R⁻¹Rx−x|={inv:.1e}; max rel norm change={norm:.1e}",
            )
        )
    return rows


def check_l2_bound(*, seed: int, trials: int) -> list[Row]:
    """Every encoding satisfies ‖x̃‖₂ ≤ Δ₂ (exact integer test) after conditional rounding."""
    from fractions import Fraction

    import numpy as np

    from secagg_dp.quantize import ZqCodec

    rows: list[Row] = []
    for beta in (0.0, math.exp(-0.5), 0.99):
        rng = np.random.default_rng([seed, int(beta * 100)])
        codec = ZqCodec(100, 32, 1.0, 20.0, rotation_seed=seed, beta=beta)
        x = rng.normal(size=(200 * max(1, trials), 100)) * 10  # all clipped to norm c
        xq = codec.quantize(x, rng=rng)
        worst = max(sum(v * v for v in row) for row in xq.tolist())
        ok = worst <= Fraction(codec.l2_sensitivity) ** 2
        rows.append(
            (
                "Δ₂ after conditional rounding",
                {"beta": round(beta, 4), "clients": len(x), "c·s": 20.0},
                ok,
                f"max ‖x̃‖₂={math.sqrt(worst):.4f} ≤ Δ₂={codec.l2_sensitivity:.4f}",
            )
        )
    return rows


def check_protocol(*, seed: int, trials: int) -> list[Row]:
    """The full secure-aggregation protocol and the simulator around it (``simulations.verify_protocol``).

    max(16, 12·trials) random rounds of ``protocols.run_secagg_round`` (q = 2^b for b in 1..62, full graph
    or SecAgg+, edge inputs q−1 / q/2 / 0, one dropout at each of the four stages in turn plus random
    per-stage dropouts, one forced abort) against the Python-int sum of the survivors; the simulator's
    per-stage dropout draw; crypto and ideal modes giving the identical modular sum.
    """
    from simulations import verify_protocol

    return list(verify_protocol.all_checks(seed=seed, cases=max(16, 12 * trials)))


#: The checks run by ``secagg-dp verify``, in order. Append a function here to add rows.
CHECKS: list[CheckFn] = [
    check_end_to_end,
    check_modular_sum_exact,
    check_encode_exact,
    check_wrap_edges,
    check_rotation,
    check_l2_bound,
    check_protocol,
]


def run_checks(checks: Sequence[CheckFn] | None = None, *, seed: int = 0, trials: int = 2) -> list[Row]:
    """Run ``checks`` (default :data:`CHECKS`) and return all their rows."""
    rows: list[Row] = []
    for check in CHECKS if checks is None else checks:
        rows.extend(check(seed=seed, trials=trials))
    return rows


def _params_text(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def format_table(rows: Sequence[Row]) -> str:
    """A fixed-width table (check | params | result | detail) followed by a one-line summary."""
    header = ("check", "params", "result", "detail")
    body = [(name, _params_text(p), "PASS" if ok else "FAIL", detail) for name, p, ok, detail in rows]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(3)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3] for r in [header, *body]]
    lines.insert(1, "-" * min(160, len(lines[0])))
    failed = sum(1 for r in rows if not r[2])
    lines.append("")
    lines.append(f"{len(rows) - failed}/{len(rows)} checks passed" + ("" if not failed else f", {failed} FAILED"))
    return "\n".join(lines)
