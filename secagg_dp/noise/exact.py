"""Exact discrete Gaussian sampler: CKS20 Algorithms 1–3 in exact rational arithmetic.

Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020,
arXiv:2004.00010 ("CKS20"). Every random decision is a comparison of a uniform integer drawn from ``rng``
with an exact rational threshold (``fractions.Fraction`` / Python integers), so the output law is exactly
N_Z(0, σ²) whenever ``rng`` delivers ideal uniform bits — no floating point is involved. The price is a
per-sample Python loop: roughly 1e5 samples per second instead of ~2e7 for the vectorised fast path.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any

import numpy as np

from secagg_dp.errors import ParameterError
from secagg_dp.noise._checks import SIGMA_MAX, check_size
from secagg_dp.rng import resolve_rng

__all__ = [
    "sample_discrete_gaussian_exact",
    "bernoulli_exp_exact",
    "sample_discrete_laplace_exact",
]

_SIGMA2_MAX = Fraction(int(SIGMA_MAX)) ** 2


def sample_discrete_gaussian_exact(
    sigma: int | float | Fraction | None,
    size: int | tuple[int, ...],
    *,
    rng: np.random.Generator | None = None,
    sigma_squared: int | Fraction | None = None,
) -> np.ndarray:
    """Draw ``size`` samples of N_Z(0, σ²) exactly (CKS20, Algorithm 3), one at a time.

    With t = ⌊σ⌋ + 1 (computed exactly as isqrt(⌊σ²⌋) + 1): repeat Y ← Lap_Z(t) (Algorithm 2),
    C ← Bernoulli(exp(−(|Y| − σ²/t)²/(2σ²))) (Algorithm 1) until C = 1; return Y. All arithmetic is on
    exact rationals; randomness is uniform integers from ``rng``. Given ideal uniform integers the output
    is exactly N_Z(0, σ²) (CKS20, analysis of Algorithm 3). Expected cost is a small constant number of loop
    iterations per sample, each a few Python-level operations: expect ~1e5 samples/s, versus
    ~2e7/s for :func:`secagg_dp.noise.sample_discrete_gaussian`, whose float64 steps are exact only up to
    rounding. Use this one when the privacy argument must hold verbatim (e.g. to release noise once), the
    fast one for simulations. Like CKS20's algorithm, the running time depends on the output (not
    constant time).

    Args:
        sigma: σ as an int, a float (converted exactly with ``Fraction(sigma)``) or a ``Fraction``; σ² is
            then computed exactly. Pass ``None`` and give ``sigma_squared`` instead when σ² is rational
            but σ is not (e.g. σ² = 2).
        size: a non-negative int or a shape tuple.
        rng: a ``np.random.Generator``; ``None`` means a fresh AES-CTR generator seeded from OS entropy.
        sigma_squared: σ² as an int or ``Fraction`` (exclusive with ``sigma``).

    Returns:
        An int64 array of shape ``size``.

    Raises:
        ParameterError: σ (or σ²) not finite and positive, σ > 1e6, both or neither of ``sigma`` and
            ``sigma_squared`` given, or ``size`` invalid.
        TypeError: ``rng`` is neither ``None`` nor a ``np.random.Generator``.
    """
    s2 = _exact_sigma_squared(sigma, sigma_squared)
    shape = check_size(size)
    gen = resolve_rng(rng)
    n = math.prod(shape)
    t = math.isqrt(s2.numerator // s2.denominator) + 1  # floor(sigma) = isqrt(floor(sigma^2))
    # gamma(|y|) = (|y| - s2/t)^2 / (2 s2) = (|y| t q - p)^2 / (2 p q t^2) with s2 = p/q
    p, q = s2.numerator, s2.denominator
    den = 2 * p * q * t * t
    src = _UniformSource(gen)
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        while True:
            y = _discrete_laplace(t, src)
            if _bernoulli_exp((abs(y) * t * q - p) ** 2, den, src):
                out[i] = y
                break
    return out.reshape(shape)


def bernoulli_exp_exact(gamma: int | Fraction, rng: np.random.Generator) -> bool:
    """Return True with probability exactly exp(−γ) for a rational γ ≥ 0 (CKS20, Algorithm 1)."""
    g = Fraction(gamma)
    if g < 0:
        raise ParameterError(f"Argument 'gamma' must be a non-negative rational, not {g}.")
    return _bernoulli_exp(g.numerator, g.denominator, _UniformSource(resolve_rng(rng), chunk=16))


def sample_discrete_laplace_exact(t: int, rng: np.random.Generator) -> int:
    """One draw of Lap_Z(t), P(y) ∝ exp(−|y|/t), for an integer scale t ≥ 1 (CKS20, Algorithm 2, s = 1)."""
    if isinstance(t, bool) or not isinstance(t, numbers.Integral) or t < 1:
        raise ParameterError(f"Argument 't' must be an integer >= 1, not {t!r}.")
    return _discrete_laplace(int(t), _UniformSource(resolve_rng(rng), chunk=16))


def _discrete_laplace(t: int, src: _UniformSource) -> int:
    """CKS20 Algorithm 2 with s = 1: U ~ Uniform{0..t−1} kept with probability exp(−U/t);
    V ~ Geometric(1 − e⁻¹) by repeated Bernoulli(e⁻¹); X = U + tV has P(X = x) ∝ e^{−x/t};
    a uniform sign, (−, 0) rejected."""
    while True:
        u = src.below(t)
        if not _bernoulli_exp(u, t, src):
            continue
        v = 0
        while _bernoulli_exp_le1(1, 1, src):
            v += 1
        x = u + t * v
        negative = src.below(2) == 1
        if negative and x == 0:
            continue
        return -x if negative else x


def _bernoulli_exp(num: int, den: int, src: _UniformSource) -> bool:
    """Bernoulli(exp(−num/den)) for integers num ≥ 0, den ≥ 1 (CKS20, Algorithm 1).

    For γ = num/den ≤ 1: draw A_k ~ Bernoulli(γ/k) for k = 1, 2, … until the first A_k = 0; return
    whether that k is odd. For γ > 1: ⌊γ⌋ independent Bernoulli(e⁻¹) successes and one
    Bernoulli(exp(−(γ − ⌊γ⌋))). Bernoulli(a/b) is ``uniform{0..b−1} < a``.
    """
    whole, frac = divmod(num, den)
    for _ in range(whole):
        if not _bernoulli_exp_le1(1, 1, src):
            return False
    return _bernoulli_exp_le1(frac, den, src)


def _bernoulli_exp_le1(num: int, den: int, src: _UniformSource) -> bool:
    k = 1
    while src.below(den * k) < num:  # A_k ~ Bernoulli(num / (den * k))
        k += 1
    return k % 2 == 1


class _UniformSource:
    """Exact uniform integers from a buffer of 64-bit words drawn with ``rng.bytes`` (bytes are uniform).

    ``below(n)`` takes ⌈log2 n⌉ bits (one word, or several for n > 2^64) and rejects values ≥ n, so each
    result is exactly uniform on {0, …, n−1} and fewer than 2 rounds are needed in expectation. Buffering
    avoids numpy's per-call overhead, which otherwise dominates the exact sampler.
    """

    __slots__ = ("_rng", "_words", "_chunk")

    def __init__(self, rng: np.random.Generator, chunk: int = 1024) -> None:
        self._rng = rng
        self._words: list[int] = []
        self._chunk = chunk

    def _word(self) -> int:
        if not self._words:
            self._words = np.frombuffer(self._rng.bytes(8 * self._chunk), dtype=np.uint64).tolist()
        return self._words.pop()

    def below(self, n: int) -> int:
        nbits = (n - 1).bit_length()
        if nbits == 0:
            return 0
        while True:
            if nbits <= 64:
                r = self._word() >> (64 - nbits)
            else:
                r = 0
                for _ in range((nbits + 63) // 64):
                    r = (r << 64) | self._word()
                r >>= 64 * ((nbits + 63) // 64) - nbits
            if r < n:
                return r


def _exact_sigma_squared(sigma: Any, sigma_squared: Any) -> Fraction:
    if (sigma is None) == (sigma_squared is None):
        raise ParameterError(
            "Exactly one of 'sigma' and 'sigma_squared' must be given, not "
            f"sigma={sigma!r} and sigma_squared={sigma_squared!r}."
        )
    name, value = ("sigma", sigma) if sigma is not None else ("sigma_squared", sigma_squared)
    allowed = (numbers.Integral, Fraction) if name == "sigma_squared" else (numbers.Integral, Fraction, float)
    if isinstance(value, bool) or not isinstance(value, allowed):
        kinds = "an int or a Fraction" if name == "sigma_squared" else "an int, a float or a Fraction"
        raise ParameterError(f"Argument '{name}' must be {kinds}, not {value!r}.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ParameterError(f"Argument '{name}' must be finite, not {value!r}.")
    exact = Fraction(value)
    s2 = exact * exact if name == "sigma" else exact
    if exact <= 0 or s2 > _SIGMA2_MAX:
        bound = "(0, 1e6]" if name == "sigma" else "(0, 1e12]"
        raise ParameterError(f"Argument '{name}' must lie in {bound}, not {value!r}.")
    return s2
