"""The discrete Gaussian N_Z(0, σ²): vectorised sampler and exact pmf.

N_Z(0, σ²) is the law on the integers with P(x) = exp(−x²/(2σ²)) / Z(σ), Z(σ) = Σ_{k∈Z} exp(−k²/(2σ²))
(Canonne, Kamath & Steinke, "The Discrete Gaussian for Differential Privacy", NeurIPS 2020,
arXiv:2004.00010; "CKS20" below).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from secagg_dp.noise._checks import check_integer_points, check_sigma, check_size
from secagg_dp.rng import resolve_rng

__all__ = [
    "sample_discrete_gaussian",
    "iter_discrete_gaussian",
    "discrete_gaussian_pmf",
    "discrete_gaussian_logpmf",
    "discrete_gaussian_log_normaliser",
]

# Proposals drawn per round of the vectorised sampler (bounds temporary memory to a few tens of MB).
_MAX_BATCH = 1 << 20


def sample_discrete_gaussian(
    sigma: float, size: int | tuple[int, ...], *, rng: np.random.Generator | None = None
) -> np.ndarray:
    """Draw ``size`` samples of N_Z(0, σ²) with the CKS20 rejection sampler, vectorised (float fast path).

    Algorithm (CKS20, Algorithm 3 with Algorithm 2 as proposal): with t = ⌊σ⌋ + 1, propose
    Y ~ Lap_Z(t), P(Y = y) ∝ exp(−|y|/t), and accept with probability exp(−(|Y| − σ²/t)² / (2σ²)).
    Accepted values have law exactly N_Z(0, σ²) when these two steps are exact (CKS20, analysis of Algorithm 3); the
    acceptance rate is Z(σ)·e^{−σ²/(2t²)}·(1−e^{−1/t})/(1+e^{−1/t}) (0.46 for tiny σ
    up to 0.76 for large σ). Batches of
    proposals are drawn with numpy, accepted ones kept and the remainder refilled; no per-sample loop.

    Floating point. This fast path realises the two random steps with float64 variates instead of the
    exact CKS20 sub-procedures:

    * the magnitude |Y| is ⌊t·E₁⌋ with E₁ = ``rng.standard_exponential()`` (so P(|Y| ≥ k) = e^{−k/t}), and
      the sign is a uniform bit, the pair (−, 0) being rejected (the discrete Laplace of CKS20 Alg. 2);
    * Bernoulli(exp(−γ)), γ = (|Y| − σ²/t)²/(2σ²), is realised as [E₂ > γ] with E₂ another
      standard exponential, since P(E₂ > γ) = e^{−γ}, instead of CKS20 Algorithm 1.

    Both events therefore have probabilities exact only up to float64 rounding of t·E₁ and of γ (relative
    error about 2⁻⁵² per operation, times γ for the acceptance probability) and up to the finite
    resolution of numpy's ziggurat exponential variates. The output law is thus N_Z(0, σ²) up to
    perturbations at the level of double-precision rounding, not exactly; the running time also
    depends on the values drawn. For an output law that is exactly N_Z(0, σ²) given ideal uniform
    integers from ``rng`` (the setting in which CKS20's privacy analysis holds verbatim), use
    :func:`secagg_dp.noise.sample_discrete_gaussian_exact`, which runs a Python loop per sample
    (~1e5 samples/s against ~2e7/s here).

    Args:
        sigma: the scale σ in (0, 1e6] (σ² is the variance of the continuous Gaussian it discretises;
            the variance of N_Z(0, σ²) is slightly below σ², as CKS20 show).
        size: a non-negative int or a shape tuple.
        rng: a ``np.random.Generator``; ``None`` means a fresh AES-CTR generator seeded from OS entropy
            (:func:`secagg_dp.rng.resolve_rng`). Pass a seeded generator for reproducibility.

    Returns:
        An int64 array of shape ``size``.

    Raises:
        ParameterError: σ not a finite real in (0, 1e6], or ``size`` negative or not integral.
        TypeError: ``rng`` is neither ``None`` nor a ``np.random.Generator``.
    """
    sigma = check_sigma(sigma)
    shape = check_size(size)
    n = math.prod(shape)
    out = np.empty(n, dtype=np.int64)
    filled = 0
    for piece in _pieces(sigma, n, resolve_rng(rng)):
        out[filled : filled + piece.size] = piece
        filled += piece.size
    return out.reshape(shape)


def iter_discrete_gaussian(sigma: float, size: int, *, rng: np.random.Generator | None = None) -> Iterator[np.ndarray]:
    """The values of ``sample_discrete_gaussian(sigma, size, rng=rng)``, in order, as consecutive int64 pieces
    of at most ``2^20`` values each: the same draws from ``rng`` (which ends in the same state), without an
    array of ``size`` values (e.g. the noise of 100 clients of dimension 10^6, drawn as one stream, row by row).
    Same algorithm and caveats as :func:`sample_discrete_gaussian` (CKS20, Algorithm 3, float fast path)."""
    sigma = check_sigma(sigma)
    n = math.prod(check_size(size))
    return _pieces(sigma, n, resolve_rng(rng))


def _pieces(sigma: float, n: int, gen: np.random.Generator) -> Iterator[np.ndarray]:
    """The accepted proposals of each batch of the vectorised CKS20 sampler, ``n`` values in all."""
    t = math.floor(sigma) + 1
    sigma2 = sigma * sigma
    shift = sigma2 / t
    half_inv_sigma2 = 0.5 / sigma2
    accept_rate = math.exp(
        discrete_gaussian_log_normaliser(sigma)
        - sigma2 / (2.0 * t * t)
        + math.log(-math.expm1(-1.0 / t))
        - math.log1p(math.exp(-1.0 / t))
    )
    filled = 0
    while filled < n:
        need = n - filled
        m = min(_MAX_BATCH, int(need / accept_rate * 1.05) + 64)
        mag = gen.standard_exponential(m)
        np.multiply(mag, t, out=mag)
        np.floor(mag, out=mag)  # |Y| = floor(t * E1), geometric with P(|Y| >= k) = exp(-k/t)
        neg = np.unpackbits(np.frombuffer(gen.bytes((m + 7) // 8), dtype=np.uint8), count=m)
        gamma = mag - shift
        np.multiply(gamma, gamma, out=gamma)
        np.multiply(gamma, half_inv_sigma2, out=gamma)
        keep = gen.standard_exponential(m) > gamma  # Bernoulli(exp(-gamma)) as [E2 > gamma]
        keep &= (mag != 0.0) | (neg == 0)  # discrete Laplace: (sign -, magnitude 0) is rejected
        # Attach the sign by setting the IEEE sign bit of the (integral, >= 0) magnitude; np.compress
        # is several times faster than boolean-mask indexing here.
        signed = mag.view(np.uint64) | (neg.astype(np.uint64) << np.uint64(63))
        vals = np.compress(keep, signed).view(np.float64).astype(np.int64)
        take = min(vals.size, need)
        if take:
            yield vals[:take]
        filled += take


def discrete_gaussian_log_normaliser(sigma: float) -> float:
    """log Z(σ), Z(σ) = Σ_{k∈Z} exp(−k²/(2σ²)), to double precision for σ in (0, 1e6].

    σ < 1: the direct sum over |k| ≤ 40σ + 2 (later terms are below e⁻⁸⁰⁰). σ ≥ 1: the Poisson-summation
    (Jacobi theta) form Z(σ) = σ√(2π)·(1 + 2 Σ_{n≥1} exp(−2π²σ²n²)) (Poisson summation formula),
    where n ≤ 3 already leaves a remainder below e⁻¹⁷⁷.
    """
    sigma = check_sigma(sigma)
    if sigma < 1.0:
        kmax = math.ceil(40.0 * sigma) + 2
        k = np.arange(1, kmax + 1, dtype=np.float64)
        terms = np.exp(-0.5 * (k / sigma) ** 2)
        return math.log(1.0 + 2.0 * math.fsum(terms[::-1]))
    tail = math.fsum(math.exp(-2.0 * math.pi**2 * sigma**2 * n * n) for n in (3, 2, 1))
    return math.log(sigma) + 0.5 * math.log(2.0 * math.pi) + math.log1p(2.0 * tail)


def discrete_gaussian_logpmf(x: Any, sigma: float) -> np.ndarray | np.float64:
    """log P(x) = −x²/(2σ²) − log Z(σ) for integer-valued ``x`` (array or scalar), σ in (0, 1e6]."""
    sigma = check_sigma(sigma)
    xs = check_integer_points("x", x)
    out = -0.5 * (xs / sigma) ** 2 - discrete_gaussian_log_normaliser(sigma)
    return out[()] if out.ndim == 0 else out


def discrete_gaussian_pmf(x: Any, sigma: float) -> np.ndarray | np.float64:
    """P(x) = exp(−x²/(2σ²)) / Z(σ) of N_Z(0, σ²) at integer-valued ``x`` (CKS20, Definition 1).

    Vectorised over ``x``; normalised to double precision for σ in (0, 1e6] (see
    :func:`discrete_gaussian_log_normaliser`). Values below the smallest double underflow to 0.
    """
    return np.exp(discrete_gaussian_logpmf(x, sigma))
