"""The Z_q codec of the distributed discrete Gaussian pipeline.

Client (encode): L2-clip to c → pad to d = 2^⌈log2 dim⌉ → rotate by R = H·D → scale by s →
conditional randomized rounding to Z^d (‖x̃‖₂ ≤ Δ₂) → add int64 noise → wrap into Z_q, q = 2^b.
Server (decode): centred representative in [−q/2, q/2) → divide by s → R^{-1} → unpad.

Kairouz, Liu & Steinke 2021, "The distributed discrete Gaussian mechanism for federated learning with
secure aggregation" (arXiv:2102.06387 v4) [KLS21], Algorithms 1–2 and Sec. 4; Wang & Jia, "Private
distributed mean estimation" (Wang & Jia 2020), Sec. 3 / Algorithm 1 (noise added on the integers, then mapped
to the quotient group Z_q; the sum of the wrapped values is the wrapped sum, so DP is post-processing).

Exactness: from the rounded int64 vector onwards the path is integer only (``zq.wrap_int64`` then
``zq.add_mod`` on uint64); float64 appears only before rounding and after the centred lift in decode.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property

import numpy as np

from secagg_dp._validate import check_finite_array, check_int, check_real
from secagg_dp.errors import ParameterError, RoundingError
from secagg_dp.quantize.hadamard import (
    hadamard_rows,
    hadamard_rows_into,
    next_pow2,
    rademacher_signs,
    rotate,
    unrotate,
)
from secagg_dp.quantize.rounding import (
    _EPS,
    _conditional_round_rows,
    _rejected,
    _row_sq_norms,
    _shrink_rows_inplace,
    rounded_l1_bound,
    rounded_l2_bound,
)
from secagg_dp.quantize.scale import DEFAULT_BETA, MAX_CLIP_SCALE, WrapBound, scale_for, wrap_around_bound
from secagg_dp.rng import resolve_rng
from secagg_dp.zq import add_mod, centered, check_bits, check_residues, wrap_int64

__all__ = ["ZqCodec", "clip_l2"]

#: Rows per pass of the fused encoder (:meth:`ZqCodec._rounded_rows`): its four work arrays of 32 x d float64
#: (256 KB each at d = 1024) stay in a core's L2 cache, where whole-batch arrays of 1 MB each did not.
_PASS_ROWS = 32


def clip_l2(x: np.ndarray, clip: float) -> np.ndarray:
    """Rows of ``x`` scaled by min(1, clip/‖row‖₂) (L2 clipping; the zero vector is left unchanged)."""
    x = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    factor = np.minimum(1.0, clip / np.where(norms > 0, norms, 1.0))
    return x * factor


@dataclass(frozen=True)
class ZqCodec:
    """Encoder/decoder between R^dim and Z_q^d, q = 2^bits, d = padded_dim.

    Parameters: ``dim`` ≥ 1 input length; ``bits`` in [1, 62]; ``clip`` c > 0 (L2); ``scale`` s > 0 with
    c·s ≤ 2^61; ``rotation_seed`` ≥ 0, the public per-round seed shared by all clients (not a secret);
    ``beta`` in [0, 1) the conditional-rounding parameter ([KLS21] Prop. 22; 0 = unconditional);
    ``max_attempts`` the retry cap of conditional rounding.
    """

    dim: int
    bits: int
    clip: float
    scale: float
    _: KW_ONLY
    rotation_seed: int
    beta: float = DEFAULT_BETA
    max_attempts: int = field(default=1000)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dim", check_int("dim", self.dim, lo=1))
        next_pow2(self.dim)  # validates the padded size
        object.__setattr__(self, "bits", check_bits(self.bits))
        object.__setattr__(self, "clip", check_real("clip", self.clip, lo=0.0, lo_open=True))
        object.__setattr__(self, "scale", check_real("scale", self.scale, lo=0.0, lo_open=True))
        object.__setattr__(self, "rotation_seed", check_int("rotation_seed", self.rotation_seed, lo=0))
        object.__setattr__(self, "beta", check_real("beta", self.beta, lo=0.0, hi=1.0, hi_open=True))
        object.__setattr__(self, "max_attempts", check_int("max_attempts", self.max_attempts, lo=1))
        if self.clip * self.scale > MAX_CLIP_SCALE:
            raise ParameterError(
                f"Arguments 'clip'·'scale' must be at most 2^61 so rounded coordinates fit in int64, not "
                f"{self.clip * self.scale:.6g}. To fix, use a smaller scale (see ZqCodec.scale_for)."
            )

    # ----- derived quantities -------------------------------------------------------------------

    @cached_property
    def padded_dim(self) -> int:
        """d: the next power of two ≥ dim (length of every encoding)."""
        return next_pow2(self.dim)

    @property
    def modulus(self) -> int:
        """q = 2^bits."""
        return 1 << self.bits

    @cached_property
    def l2_sensitivity(self) -> float:
        """Δ₂ on the integer grid: every encoding (before noise) satisfies ‖x̃‖₂ ≤ Δ₂ ([KLS21] Thm 1, Prop. 22).

        This is the L2 sensitivity of the sum under add-remove neighbours; under replace-one it is ≤ 2Δ₂.
        """
        return rounded_l2_bound(self.clip * self.scale, self.padded_dim, self.beta)

    @property
    def l1_sensitivity(self) -> float:
        """Δ₁ = Δ₂·min(√d, Δ₂) on the integer grid (add-remove; ≤ 2Δ₁ under replace-one)."""
        return rounded_l1_bound(self.l2_sensitivity, self.padded_dim)

    @cached_property
    def _signs(self) -> np.ndarray:
        signs = rademacher_signs(self.rotation_seed, self.padded_dim)
        signs.setflags(write=False)
        return signs

    # ----- building blocks ------------------------------------------------------------------------

    def _check_input(self, x: object, *, finite: bool = True) -> np.ndarray:
        """``x`` as float64 after the checks (``finite`` False: :meth:`_rounded_rows` checks finiteness)."""
        arr = np.asarray(x)
        if arr.dtype == np.bool_:
            raise ParameterError(f"Argument 'x' must be a real numeric array, not dtype {arr.dtype}.")
        arr = check_finite_array("x", arr, finite=finite)
        if arr.ndim not in (1, 2) or arr.shape[-1] != self.dim:
            raise ParameterError(
                f"Argument 'x' must have shape ({self.dim},) or (n_clients, {self.dim}), not {arr.shape}."
            )
        return arr

    def rotate(self, x: np.ndarray) -> np.ndarray:
        """Clip-free forward map: pad to d and apply R = H·D along the last axis (float64)."""
        arr = self._check_input(x)
        padded = np.zeros(arr.shape[:-1] + (self.padded_dim,), dtype=np.float64)
        padded[..., : self.dim] = arr
        return rotate(padded, self._signs)

    def unrotate(self, y: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`rotate`: apply R^{-1} = D·H and drop the padding."""
        y = check_finite_array("y", y, length=self.padded_dim)
        return unrotate(y, self._signs)[..., : self.dim]

    @cached_property
    def _unit(self) -> float:
        """s·(1 − 3γ)/√d, γ = 4(d + 2)·2^-53: the scale, the pre-shrink and H's 1/√d as one factor."""
        gamma = 4.0 * (self.padded_dim + 2) * _EPS
        return self.scale * (1.0 - 3.0 * gamma) / math.sqrt(self.padded_dim)

    @cached_property
    def _unit_signs_rows(self) -> np.ndarray:
        """(unit·ε_j) for j < dim, repeated on :data:`_PASS_ROWS` rows (one product per pass, no broadcast)."""
        tile = np.tile(self._unit * self._signs[: self.dim], (_PASS_ROWS, 1))
        tile.setflags(write=False)
        return tile

    @cached_property
    def _within_sq(self) -> float:
        """(c(1 + γ))²: rows whose float squared norm is at most this are not clipped (see _clip_factors)."""
        return (self.clip * (1.0 + 4.0 * (self.padded_dim + 2) * _EPS)) ** 2

    def _clip_factors(self, a: np.ndarray) -> np.ndarray | None:
        """Per row of ``a`` unit·min(1, c/‖x‖), with 1 for every ‖x‖ ≤ c(1 + γ) (a row normalised to c in
        float64, whose computed norm can exceed c by a few ulps, is left as it is); None when that is every row.
        (A squared norm that overflows to infinity gives the factor 0, as the clip of such a row is 0 in float.)

        Also the finiteness check of ``a``: a NaN or an infinity makes its row's squared norm, and their sum,
        NaN or infinite; only then (or on overflow) is ``a`` checked entry by entry (ParameterError)."""
        with np.errstate(over="ignore", invalid="ignore"):
            sq = _row_sq_norms(a)
            total = float(np.add.reduce(sq))
        if not math.isfinite(total):
            check_finite_array("x", a)
        if not sq.size or np.maximum.reduce(sq) <= self._within_sq:
            return None
        within = sq <= self._within_sq
        ratio = np.where(within, 1.0, self.clip / np.sqrt(np.where(within, 1.0, sq)))
        factor: np.ndarray = self._unit * ratio
        return factor

    def _clip_rotate_scale(self, a: np.ndarray) -> np.ndarray:
        """s·R·pad(clip(x)) for checked float64 rows ``a`` (2-D), with exact ‖row‖₂ ≤ C = c·s (shape (n, d)).

        One pass computes the row norms; the clip factor min(1, c/‖x‖), the scale s and the signs ε of D
        are applied while padding (with the 1/√d of the orthonormal H), then the Sylvester matrix by
        :func:`~secagg_dp.quantize.hadamard.hadamard_rows`. Rows whose float norm is within c(1 + γ),
        γ = 4(d + 2)·2^-53 (the error band of a float norm), are not clipped, and the factor carries an extra
        (1 − 3γ), so that those rows and float error in the rotation (relative ~1e-15) stay below
        :func:`shrink_to_norm`'s target C(1 − γ); its exact-norm guard still runs (in place) and rescales
        any row that is not, so ‖y‖₂ ≤ C holds exactly whatever the float error. The same map as
        ``s·rotate(clip_l2(x))`` up to a relative 3γ (5e-12 at d = 1024).
        """
        n = a.shape[0]
        factor = self._clip_factors(a)
        if factor is None:
            factor = np.full(n, self._unit)
        padded = np.empty((n, self.padded_dim))
        padded[:, self.dim :] = 0.0
        head = padded[:, : self.dim]
        np.multiply(a, factor[:, None], out=head)
        head *= self._signs[: self.dim]
        y = hadamard_rows(padded)
        _shrink_rows_inplace(y, self.clip * self.scale)  # exact ‖y‖₂ ≤ c·s despite float error
        return y

    def _quantize_rows(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Conditionally rounded rows of checked float64 ``a`` (2-D), as integer-valued float64 (|x̃| ≤ Δ₂).

        The stage-by-stage form (each stage over the whole batch); :meth:`_rounded_rows` computes the same rows
        bit for bit in passes of :data:`_PASS_ROWS` rows (tested), and is what the codec runs."""
        y = self._clip_rotate_scale(a)
        return _conditional_round_rows(y, self.l2_sensitivity, rng, self.max_attempts)

    def _rounded_rows(
        self,
        a: np.ndarray,
        rng: np.random.Generator,
        *,
        keep: np.ndarray | None = None,
        rows: bool = True,
        defer: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None = None,
    ) -> np.ndarray:
        """:meth:`_quantize_rows` of checked float64 ``a`` (2-D) fused per pass of :data:`_PASS_ROWS` rows.

        Each pass runs clip, pad, rotation, scale, the exact-norm guard and the first rounding draw of its rows
        in preallocated arrays (few numpy calls per pass: each costs microseconds on small arrays), then the
        rows above Δ₂ are redrawn after the last pass, as
        :func:`~secagg_dp.quantize.rounding.conditional_round` does for the whole batch: every row's float
        operations are the same row-wise operations in the same order (the batched products and the row norms
        do not depend on the other rows), and ``rng.random`` fills the passes' arrays one after the other, so
        the first draws take the same uniforms as one draw of the batch and the redraws follow in the same
        order. ``rows`` True: the (n, d) integer-valued float64 rows. False: their float64 sum over the rows
        in ``keep`` (None: all), shape (d,), exact when n·(Δ₂ + 1) < 2^53 (every partial sum is an integer
        below 2^53), without keeping the rows. ``defer`` (with ``rows``): no redraws here; the rejected rows
        (indices, first rounding, up bits, fractions) are appended to it and left at their first draw in the
        output (:meth:`quantize_stream` redraws them after its last batch)."""
        n = a.shape[0]
        d, dim = self.padded_dim, self.dim
        bound, cs = self.l2_sensitivity, self.clip * self.scale
        signs, tile = self._signs[:dim], self._unit_signs_rows
        p = max(1, min(n, _PASS_ROWS))
        x_buf, t_buf, y_buf, u_buf = (np.empty((p, d)) for _ in range(4))
        x_buf[:, dim:] = 0.0  # the padding, written once: the passes write the head only
        b_buf = np.empty((p, d), dtype=np.bool_)
        out = np.empty((n, d)) if rows else np.zeros((p, d))  # rows, or per-pass-row partial sums
        drop = None if rows or keep is None or keep.all() else ~keep
        redo: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # (rows, rounded, up, fraction)
        factors = self._clip_factors(a)  # None: no row is clipped (one pass over the block: measured faster)
        for lo in range(0, n, p):
            m = min(p, n - lo)
            xa, xp, y, up = a[lo : lo + m], x_buf[:m], y_buf[:m], b_buf[:m]
            if factors is None:  # x·(unit·ε) = (x·unit)·ε exactly (ε = ±1): the rows of the general branch
                np.multiply(xa, tile[:m], out=xp[:, :dim])
            else:
                np.multiply(xa, factors[lo : lo + m, None], out=xp[:, :dim])
                xp[:, :dim] *= signs
            hadamard_rows_into(xp, y, t_buf[:m])
            _shrink_rows_inplace(y, cs)
            r = out[lo : lo + m] if rows else t_buf[:m]
            np.floor(y, out=r)
            np.subtract(y, r, out=y)  # the fraction y - floor(y), exact
            np.less(rng.random(out=u_buf[:m]), y, out=up)
            r += up
            bad = _rejected(r, bound)
            if bad.size:
                redo.append((bad + lo, r[bad], up[bad], y[bad]))
                if not rows:
                    r[bad] = 0.0
            if not rows:
                if drop is not None:
                    r[drop[lo : lo + m]] = 0.0
                out[:m] += r  # exact: integers below 2^53 (see the caller)
        if redo and defer is not None and rows:
            defer.extend(redo)
            redo = []
        if redo:
            pending = np.concatenate([i for i, _, _, _ in redo])
            floor = np.concatenate([r for _, r, _, _ in redo]) - np.concatenate([u for _, _, u, _ in redo])
            frac = np.concatenate([f for _, _, _, f in redo])
            for _ in range(self.max_attempts - 1):
                again = floor + (rng.random(frac.shape) < frac)  # the draws of rounding._round_rows
                bad = _rejected(again, bound)
                if rows:
                    good = np.ones(pending.size, dtype=np.bool_)
                    good[bad] = False
                    out[pending[good]] = again[good]
                else:
                    again[bad] = 0.0
                    if drop is not None:  # dropped rows are redrawn (the same draws) but not summed
                        again[drop[pending]] = 0.0
                    out[0] += again.sum(axis=0)  # exact, as above
                pending, floor, frac = pending[bad], floor[bad], frac[bad]
                if pending.size == 0:
                    break
            if pending.size:
                raise RoundingError(
                    f"Conditional randomized rounding did not reach ‖x̃‖₂ ≤ {bound:.6g} for {pending.size} "
                    f"vector(s) within max_attempts={self.max_attempts} draws. To fix, check that the input "
                    "norm is at most the clip (the bound assumes it), raise 'max_attempts', or use a smaller "
                    "'beta' (β = 0 never rejects)."
                )
        return out if rows else out.sum(axis=0)

    def quantize_stream(
        self, batches: Iterable[np.ndarray], *, rng: np.random.Generator | None = None
    ) -> Iterator[tuple[int, np.ndarray]]:
        """:meth:`quantize` of the rows of ``batches`` (2-D arrays of shape (m, dim), taken in order) as if they
        were one batch, a few rows at a time: yields ``(row index, x̃ row as int64)`` once per row, with the
        draws of ``quantize(np.concatenate(batches), rng=rng)`` in the same order (every row's first rounding
        draw, batch after batch; then the redraws of the rows above Δ₂, [KLS21] Prop. 22, after the last batch),
        so every row is the same bit for bit. Rows accepted at their first draw come as their batch is rounded,
        redrawn ones after the last batch. Memory: one batch, not the n x d rows (e.g. one client at a time
        at d = 2^20)."""
        rng = resolve_rng(rng)
        bound = self.l2_sensitivity
        redo: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        lo = 0
        for x in batches:
            arr = np.asarray(self._check_input(x, finite=False), dtype=np.float64)
            if arr.ndim != 2:
                raise ParameterError(f"Argument 'batches' must hold arrays of shape (m, {self.dim}), not {arr.shape}.")
            held = len(redo)
            out = self._rounded_rows(arr, rng, defer=redo)
            later = {int(i) for part in redo[held:] for i in part[0]}
            redo[held:] = [(i + lo, r, u, f) for i, r, u, f in redo[held:]]
            for i in range(arr.shape[0]):
                if i not in later:
                    yield lo + i, out[i].astype(np.int64)
            lo += arr.shape[0]
            del out
        if not redo:
            return
        pending = np.concatenate([i for i, _, _, _ in redo])
        floor = np.concatenate([r for _, r, _, _ in redo]) - np.concatenate([u for _, _, u, _ in redo])
        frac = np.concatenate([f for _, _, _, f in redo])
        for _ in range(self.max_attempts - 1):
            again = floor + (rng.random(frac.shape) < frac)  # the redraws of _rounded_rows, same order
            bad = _rejected(again, bound)
            good = np.ones(pending.size, dtype=np.bool_)
            good[bad] = False
            for j in np.flatnonzero(good):
                yield int(pending[j]), again[j].astype(np.int64)
            pending, floor, frac = pending[bad], floor[bad], frac[bad]
            if pending.size == 0:
                return
        raise RoundingError(
            f"Conditional randomized rounding did not reach ‖x̃‖₂ ≤ {bound:.6g} for {pending.size} "
            f"vector(s) within max_attempts={self.max_attempts} draws. To fix, check that the input "
            "norm is at most the clip (the bound assumes it), raise 'max_attempts', or use a smaller "
            "'beta' (β = 0 never rejects)."
        )

    def quantize(self, x: np.ndarray, *, rng: np.random.Generator | None = None) -> np.ndarray:
        """Clip, rotate, scale and conditionally round: the int64 vector(s) x̃ with ‖x̃‖₂ ≤ Δ₂ (no noise, no wrap)."""
        rng = resolve_rng(rng)
        arr = np.asarray(self._check_input(x, finite=False), dtype=np.float64)
        rows = self._rounded_rows(arr.reshape(-1, self.dim), rng)
        return rows.astype(np.int64).reshape(arr.shape[:-1] + (self.padded_dim,))

    # ----- public codec ---------------------------------------------------------------------------

    def encode(
        self,
        x: np.ndarray,
        *,
        noise: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Encode one vector (shape (dim,)) or a batch (shape (n, dim)) into uint64 residues mod 2^bits.

        Returns shape (padded_dim,) or (n, padded_dim): (x̃ + noise) mod q, computed exactly as
        wrap(x̃) + wrap(noise) in Z_q (no int64 overflow whatever the noise). ``noise`` must be an int64
        array of the output shape (e.g. ``secagg_dp.noise.sample_discrete_gaussian(s·σ, …)``).
        ``rng`` drives the randomized rounding (None: cryptographically strong default).
        """
        xq = self.quantize(x, rng=rng)
        out = wrap_int64(xq, self.bits)
        if noise is not None:
            z = np.asarray(noise)
            if z.dtype != np.int64:
                raise ParameterError(f"Argument 'noise' must have dtype int64, not {z.dtype}.")
            if z.shape != xq.shape:
                raise ParameterError(f"Argument 'noise' must have shape {xq.shape}, not {z.shape}.")
            out = add_mod(out, wrap_int64(z, self.bits), self.bits)
        return out

    def encode_sum(
        self,
        x: np.ndarray,
        *,
        keep: np.ndarray | None = None,
        noise: np.ndarray | None = None,
        rng: np.random.Generator | None = None,
    ) -> np.ndarray:
        """Σ_{kept rows} encode(x)_row mod q: the modular sum of a batch's encodings, shape (padded_dim,).

        Equal bit for bit to ``zq.sum_mod(self.encode(x, noise=noise, rng=rng)[keep], bits)`` (the same draws
        from ``rng``, in the same order: every row is rounded, kept or not, as every client of a real round
        encodes), without wrapping each row: the int64 rows are summed mod 2^64 (q divides 2^64) and reduced
        once. ``keep``: a boolean mask over the rows (None: all); ``noise``: int64 of shape (n, padded_dim).
        """
        arr = np.asarray(self._check_input(x, finite=False), dtype=np.float64)
        if arr.ndim != 2:
            raise ParameterError(f"Argument 'x' must have shape (n_clients, {self.dim}), not {arr.shape}.")
        n = arr.shape[0]
        k = None
        if keep is not None:
            k = np.asarray(keep)
            if k.dtype != np.bool_ or k.shape != (n,):
                raise ParameterError(f"Argument 'keep' must be a boolean mask of shape ({n},).")
        z = None
        if noise is not None:
            z = np.asarray(noise)
            if z.dtype != np.int64:
                raise ParameterError(f"Argument 'noise' must have dtype int64, not {z.dtype}.")
            if z.shape != (n, self.padded_dim):
                raise ParameterError(f"Argument 'noise' must have shape {(n, self.padded_dim)}, not {z.shape}.")
        mask = np.uint64((1 << self.bits) - 1)
        if z is None and n * (self.l2_sensitivity + 1.0) < 2.0**53:
            # every |x̃_ij| ≤ Δ₂, so each partial sum is an integer below 2^53: the float64 sum is exact
            total = self._rounded_rows(arr, resolve_rng(rng), keep=k, rows=False)
            exact: np.ndarray = total.astype(np.int64).view(np.uint64) & mask
            return exact
        xq = self._rounded_rows(arr, resolve_rng(rng)).astype(np.int64).view(np.uint64)
        if z is not None:
            xq += z.view(np.uint64)  # mod 2^64, exact mod q
        if k is not None and not k.all():
            xq = xq[k]
        out: np.ndarray = xq.sum(axis=0, dtype=np.uint64) & mask
        return out

    def decode(self, aggregate: np.ndarray) -> np.ndarray:
        """Decode a modular sum (uint64 residues mod 2^bits, shape (padded_dim,) or (m, padded_dim)).

        Lifts each residue to its centred representative in [−q/2, q/2) (exact, int64), divides by s,
        applies R^{-1} and drops the padding. Equals Σ_i clip(x_i) + R^{-1}(Σ_i e_i + Σ_i z_i)/s when no
        coordinate of the integer sum left [−q/2, q/2) (see :meth:`decode_error_bound`).
        """
        agg = check_residues("aggregate", aggregate, self.bits)
        if agg.ndim not in (1, 2) or agg.shape[-1] != self.padded_dim:
            raise ParameterError(
                f"Argument 'aggregate' must have shape ({self.padded_dim},) or (m, {self.padded_dim}), not {agg.shape}."
            )
        lifted = centered(agg, self.bits).astype(np.float64)
        lifted /= self.scale
        return unrotate(lifted, self._signs)[..., : self.dim]

    # ----- bounds ---------------------------------------------------------------------------------

    def decode_error_bound(self, n_clients: int, noise_l2: float = 0.0) -> float:
        """Deterministic bound on ‖decode(Σ enc_i) − Σ_i clip(x_i)‖₂ when no wrap occurred.

        Each rounding error coordinate is in (−1, 1), so ‖Σ_i e_i‖₂ < n·√d; R^{-1} is orthogonal and
        unpadding does not increase the norm: error ≤ (n·√d + ‖Σ_i z_i‖₂)/s, ``noise_l2`` = ‖Σ_i z_i‖₂.
        (Float64 rounding of the transforms adds a relative ~1e-15·log2(d) on top.)
        """
        n = check_int("n_clients", n_clients, lo=1)
        noise_l2 = check_real("noise_l2", noise_l2, lo=0.0)
        return (n * math.sqrt(self.padded_dim) + noise_l2) / self.scale

    def wrap_bound(self, n_clients: int, sigma: float = 0.0) -> WrapBound:
        """:func:`wrap_around_bound` for this codec (σ per client in original units, discrete Gaussian)."""
        return wrap_around_bound(
            bits=self.bits,
            scale=self.scale,
            clip=self.clip,
            dim=self.dim,
            n_clients=n_clients,
            sigma=sigma,
            beta=self.beta,
        )

    #: The k-standard-deviations scale rule, :func:`secagg_dp.quantize.scale.scale_for` itself.
    scale_for = staticmethod(scale_for)
