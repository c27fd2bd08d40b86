"""Closed-form results of the papers, as pure numpy functions (no torch, no training).

Three groups, one per paper:

* DeepCrossAttention: Supercharging Transformer Residual Connections, Section 4 and Appendices A-C: the
  low-rank *linear* model y = A x + noise with whitened inputs (E[x x^T] = I, as the paper assumes), so the
  excess risk of a linear model x -> Â x is ||A - Â||_F^2. Theorem 4.1 describes each
  architecture's class of models; `optimal_*` compute each class's best excess risk
  ER*(C) (Eckart-Young-Mirsky where it is closed form, a global scan for GRN-v1's scalar,
  a multi-start local search for GRN-v2/v3), `excess_risk_bounds` is Theorem 4.2, and
  `rank_thresholds`, `gain_lower_bounds`, `figure5_curves` are Theorem 4.3 / Figure 5.
* Stability and Convergence Theory for Learning ResNet: `predicted_norm_growth`,
  the expected forward norm E||h_l||^2 / ||h_0||^2 of h_l = relu(h_{l-1} + tau W_l h_{l-1})
  (an exact expectation for the linear analogue, upper and lower bounds for ReLU).
* Cutting the Skip: Training Residual-Free Transformers, Proposition 1 and Appendix A.2: `softmax_condition`,
  `softmax_condition_bounds`, `sample_mimetic_logits`, `mimetic_attention_condition`,
  `mimetic_logit_statistics` (Eqs. 14-20).

Where the text conversion garbled a formula, the docstring says what was read instead.
Everything takes plain numbers or numpy arrays and returns floats, arrays or small frozen
dataclasses of them; randomness only comes from a `numpy.random.Generator` passed in. The closed forms of three papers
share this one module so that the Theory page, the diagnosis and the claims read one copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence, Union

import numpy as np

__all__ = [
    "ClassOptima",
    "ClassOptimum",
    "ExcessRiskBounds",
    "Figure5Curves",
    "GainBounds",
    "MimeticLogitStatistics",
    "NormGrowth",
    "RankThresholds",
    "SoftmaxConditionBounds",
    "collective_rank",
    "eckart_young",
    "equal_error_collective_rank",
    "equal_parameter_rank_lower_bounds",
    "excess_risk_bounds",
    "figure5_curves",
    "gain_lower_bounds",
    "mimetic_attention_condition",
    "mimetic_logit_statistics",
    "optimal_baseline",
    "optimal_excess_risks",
    "optimal_grn_v1",
    "optimal_grn_v2",
    "optimal_grn_v3",
    "optimal_resnet",
    "parameter_count",
    "predicted_norm_growth",
    "rank_thresholds",
    "relu_term_risk",
    "sample_mimetic_logits",
    "softmax",
    "softmax_condition",
    "softmax_condition_bounds",
]

Ranks = Union[int, Sequence[int]]


# --------------------------------------------------------------------------- validation

def _square(A, name: str = "A") -> np.ndarray:
    try:
        A = np.asarray(A, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real square matrix (a d x d numpy array)") from exc
    if A.ndim != 2 or A.shape[0] != A.shape[1] or A.shape[0] < 1:
        raise ValueError(f"{name} must be a square d x d matrix, got shape {A.shape}; "
                         f"pass the target matrix of y = A x")
    if not np.all(np.isfinite(A)):
        raise ValueError(f"{name} contains NaN or inf; pass a finite matrix")
    return A


def collective_rank(ranks: Ranks) -> int:
    """r_* = sum_t r_t, the collective rank of the layers (DCA Sec. 4.1); an int is taken as r_* itself."""
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, bool):
        values = [int(ranks)]
    else:
        try:
            values = list(ranks)
        except TypeError as exc:
            raise ValueError("ranks must be an int (the collective rank r_*) or a sequence of "
                             "per-layer ranks r_t") from exc
        if not values:
            raise ValueError("ranks is empty; pass at least one layer rank")
    for r in values:
        if isinstance(r, bool) or not isinstance(r, (int, np.integer)) or r < 0:
            raise ValueError(f"ranks must be non-negative integers, got {r!r}")
    return int(sum(int(r) for r in values))


def _rank(ranks: Ranks, d: int, *, strict: bool) -> int:
    r = collective_rank(ranks)
    if strict and r >= d:
        raise ValueError(f"the collective rank r_* = {r} must be < d = {d} (Theorem 4.2 divides by "
                         f"d - r_*); pass smaller ranks")
    if r > d:
        raise ValueError(f"the collective rank r_* = {r} exceeds d = {d}; pass ranks summing to at most d")
    return r


def _positive(x, name: str, *, allow_zero: bool = False) -> np.ndarray:
    arr = np.asarray(x, dtype=float)
    bad = (arr < 0) if allow_zero else (arr <= 0)
    if not np.all(np.isfinite(arr)) or np.any(bad):
        need = "non-negative" if allow_zero else "positive"
        raise ValueError(f"{name} must be finite and {need}, got {x!r}")
    return arr


def _kappa(kappa) -> np.ndarray:
    arr = np.asarray(kappa, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ValueError(f"kappa = lambda_min / lambda_max must lie in [0, 1], got {kappa!r}")
    return arr


def _dim(d, name: str = "d", minimum: int = 1) -> int:
    if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {d!r}")
    return int(d)


def _rng(rng) -> np.random.Generator:
    if rng is None:
        return np.random.default_rng()
    if isinstance(rng, (int, np.integer)):
        return np.random.default_rng(int(rng))
    if not isinstance(rng, np.random.Generator):
        raise ValueError("rng must be a numpy.random.Generator, an int seed or None")
    return rng


# --------------------------------------------------------------------------- DCA, Thm 4.1

def _ey(M: np.ndarray, k: int) -> tuple[np.ndarray, float]:
    U, s, Vt = np.linalg.svd(M, full_matrices=False)
    return (U[:, :k] * s[:k]) @ Vt[:k], float(np.sum(s[k:] ** 2))


def eckart_young(M, k: int) -> tuple[np.ndarray, float]:
    """Best rank-k approximation of M and its squared Frobenius error sum_{i>k} sigma_i^2.

    Eckart-Young-Mirsky: truncating the SVD is optimal in Frobenius norm; the error is the
    sum of the squared discarded singular values (used in DCA Sec. 4.2 / App. B).
    """
    M = np.asarray(M, dtype=float)
    if M.ndim != 2 or not np.all(np.isfinite(M)):
        raise ValueError(f"M must be a finite 2-D matrix, got shape {M.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 0 <= k <= min(M.shape):
        raise ValueError(f"k must be an integer in [0, {min(M.shape)}], got {k!r}")
    return _ey(M, int(k))


@dataclass(frozen=True, eq=False)
class ClassOptimum:
    """The best model found in one architecture class for a target A (DCA Thm 4.1 / Sec. 4.2).

    `excess_risk` is ||A - matrix||_F^2 (for GRN-v3 the risk including its ReLU term),
    `matrix` the linear part Â = diag(diagonal) + low_rank, `low_rank` the rank-<=r_* part M,
    `diagonal` the diagonal of D (ones for ResNet, alpha for GRN-v1, zeros for the baseline)
    and `relu_weight` the w of GRN-v3's relu(w^T x) x term (None elsewhere).
    """

    excess_risk: float
    matrix: np.ndarray
    low_rank: np.ndarray
    diagonal: np.ndarray
    relu_weight: np.ndarray | None = None


def optimal_baseline(A, ranks: Ranks) -> ClassOptimum:
    """ER*(C_base): best approximation of A of rank <= min_t r_t (Thm 4.1, no skip connection).

    An int `ranks` is one layer of that rank.
    """
    A = _square(A)
    d = A.shape[0]
    collective_rank(ranks)  # validates
    r_min = int(ranks) if isinstance(ranks, (int, np.integer)) else int(min(ranks))
    if r_min > d:
        raise ValueError(f"the smallest layer rank {r_min} exceeds d = {d}; pass ranks <= d")
    M, err = _ey(A, r_min)
    return ClassOptimum(err, M, M, np.zeros(d))


def optimal_resnet(A, ranks: Ranks) -> ClassOptimum:
    """ER*(C_res) = sum_{i>r_*} sigma_i(A - I)^2: Â = I + best rank-r_* approximation of A - I.

    Thm 4.1: prod_t (I + V_t) ranges over exactly {I + M : rank M <= r_*}; Thm 4.2's first
    line (ER*(C_res) = ||Delta||_F^2) is this value.
    """
    A = _square(A)
    d = A.shape[0]
    r = _rank(ranks, d, strict=False)
    M, err = _ey(A - np.eye(d), r)
    return ClassOptimum(err, np.eye(d) + M, M, np.ones(d))


def _tail_energy(stack: np.ndarray, r: int) -> np.ndarray:
    s = np.linalg.svd(stack, compute_uv=False)
    return np.sum(s[..., r:] ** 2, axis=-1)


def _golden(f, lo: float, hi: float, iters: int = 60) -> float:
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = float(lo), float(hi)
    c, e = b - g * (b - a), a + g * (b - a)
    fc, fe = f(c), f(e)
    for _ in range(iters):
        if fc <= fe:
            b, e, fe = e, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, e, fe
            e = a + g * (b - a)
            fe = f(e)
    return c if fc <= fe else e


def _delta(A: np.ndarray, r: int) -> tuple[np.ndarray, np.ndarray]:
    """Delta = A - I - U_r Sigma_r V_r^T and U_{r,perp} (DCA Thm 4.2)."""
    d = A.shape[0]
    U, s, Vt = np.linalg.svd(A - np.eye(d))
    return (U[:, r:] * s[r:]) @ Vt[r:], U[:, r:]


def _grn_v1(A: np.ndarray, r: int, grid: int) -> ClassOptimum:
    d = A.shape[0]
    eye = np.eye(d)
    if r == d:
        return ClassOptimum(0.0, A.copy(), A - eye, np.ones(d))

    def f(alpha: float) -> float:
        return float(_tail_energy(A - alpha * eye, r))

    delta, _ = _delta(A, r)
    radius = float(np.linalg.norm(A, 2)) + math.sqrt(float(np.sum(delta ** 2)) / (d - r)) + 1e-9
    alphas = np.linspace(-radius, radius, grid)
    values = _tail_energy(A[None] - alphas[:, None, None] * eye, r)
    padded = np.concatenate(([np.inf], values, [np.inf]))
    local = np.flatnonzero((values <= padded[:-2]) & (values <= padded[2:]))
    local = local[np.argsort(values[local])][:8]  # the deepest few grid minima
    candidates = [1.0, 1.0 + float(np.trace(delta)) / (d - r)]
    for i in local:
        candidates.append(float(alphas[i]))
        candidates.append(_golden(f, alphas[max(i - 1, 0)], alphas[min(i + 1, grid - 1)]))
    alpha = min(candidates, key=f)
    M, err = _ey(A - alpha * eye, r)
    return ClassOptimum(err, alpha * eye + M, M, np.full(d, alpha))


def optimal_grn_v1(A, ranks: Ranks, *, grid: int = 513) -> ClassOptimum:
    """ER*(C_GRN-v1) = min_alpha sum_{i>r_*} sigma_i(A - alpha I)^2 (Thm 4.1: alpha I + rank-r_* M).

    No closed form: the one-dimensional objective is not convex, so it is scanned on a `grid`
    over the interval that must hold the optimum, |alpha| <= ||A||_2 + sqrt(ER*(C_res)/(d -
    r_*)) (every discarded singular value is >= |alpha| - ||A||_2 and alpha = 1 is feasible),
    and each of the deepest grid minima is refined by golden-section search. alpha = 1
    (ResNet) and App. B's alpha = 1 + tr(Delta)/(d - r_*) are always candidates, so the
    value is <= ER*(C_res) and <= Theorem 4.2's GRN-v1 bound.
    """
    A = _square(A)
    r = _rank(ranks, A.shape[0], strict=False)
    return _grn_v1(A, r, _dim(grid, "grid", 3))


def _bfgs(fun, x0: np.ndarray, max_iter: int, scale: float) -> np.ndarray:
    """Local minimiser of a smooth objective `fun(x) -> (value, gradient)`: BFGS, Armijo steps.

    Plain numpy (no scipy). Returns the best point seen, never worse than x0.
    """
    x = np.array(x0, dtype=float)
    f, g = fun(x)
    n = x.size
    H = np.eye(n)
    gtol = 1e-9 * max(scale, 1.0)
    for it in range(max_iter):
        if not np.isfinite(f) or float(np.linalg.norm(g)) <= gtol:
            break
        p = -H @ g
        slope = float(g @ p)
        if slope >= 0.0:  # not a descent direction: restart from steepest descent
            H = np.eye(n)
            p, slope = -g, -float(g @ g)
        t = 1.0
        for _ in range(50):
            f_new, g_new = fun(x + t * p)
            if f_new <= f + 1e-4 * t * slope:
                break
            t *= 0.5
        else:
            break
        s = t * p
        y = g_new - g
        sy = float(s @ y)
        x, f_old, f, g = x + s, f, f_new, g_new
        if sy > 1e-12 * float(np.linalg.norm(s) * np.linalg.norm(y)):
            if it == 0:
                H = np.eye(n) * (sy / float(y @ y))
            rho = 1.0 / sy
            Hy = H @ y
            H = H + (rho * rho * float(y @ Hy) + rho) * np.outer(s, s) - rho * (np.outer(Hy, s) + np.outer(s, Hy))
        if f_old - f <= 1e-15 * max(abs(f), 1e-300):
            break
    return x


def _alternate(A: np.ndarray, r: int, D: np.ndarray, w: np.ndarray | None, max_iter: int):
    """Monotone block-coordinate descent over (M, D[, w]): exact step in each block in turn."""
    best = None
    for _ in range(max_iter):
        K = _relu_gram(w) if w is not None else 0.0
        M, _ = _ey(A - np.diag(D) - K, r)
        D = np.diag(A - M - K).copy()
        B = A - np.diag(D) - M
        err, w = relu_term_risk(B) if w is not None else (float(np.sum(B ** 2)), None)
        if best is not None and best[0] - err <= 1e-13 * max(err, 1e-300):
            if err < best[0]:
                best = (err, D, M, w)
            break
        best = (err, D, M, w)
    return best


def _grn_v2(A: np.ndarray, r: int, max_iter: int, v1: ClassOptimum) -> ClassOptimum:
    d = A.shape[0]
    if r == d:
        return ClassOptimum(0.0, A.copy(), A - np.eye(d), np.ones(d))

    def objective(D):  # g(D) = min_M ||A - D - M||^2 and its gradient -2 diag(residual)
        U, s, Vt = np.linalg.svd(A - np.diag(D))
        return float(np.sum(s[r:] ** 2)), -2.0 * np.einsum("ik,k,ki->i", U[:, r:], s[r:], Vt[r:])

    delta, _ = _delta(A, r)
    best = (v1.excess_risk, v1.diagonal.copy(), v1.low_rank.copy())
    for start in (v1.diagonal, np.diag(np.eye(d) + delta), np.diag(A), np.zeros(d)):
        D = _bfgs(objective, np.array(start, dtype=float), max_iter, float(np.linalg.norm(A)))
        err, D, M, _ = _alternate(A, r, D, None, 20)
        if err < best[0]:
            best = (err, D, M)
    err, D, M = best
    return ClassOptimum(err, np.diag(D) + M, M, D)


def optimal_grn_v2(A, ranks: Ranks, *, max_iter: int = 300) -> ClassOptimum:
    """ER*(C_GRN-v2) = min over diagonal D and rank-<=r_* M of ||A - D - M||_F^2 (Thm 4.1).

    "Diagonal plus low rank" has no Eckart-Young closed form. M is eliminated exactly
    (g(D) = sum_{i>r_*} sigma_i(A - D)^2, gradient -2 diag of the discarded part) and g is
    minimised by BFGS from four starts: the GRN-v1 optimum, App. B's D = I + diag(Delta)
    (whose value is ||Delta||^2 - sum_i Delta_ii^2), diag(A) and 0; a few exact alternating
    steps then polish it. The GRN-v1 optimum is kept if nothing beats it, so the value is
    <= ER*(C_GRN-v1) and <= Theorem 4.2's GRN-v2 bound, and is achieved by the returned
    matrix: an upper bound on the true ER* (a local optimum, not a certified global one).
    """
    A = _square(A)
    d = A.shape[0]
    r = _rank(ranks, d, strict=False)
    return _grn_v2(A, r, _dim(max_iter, "max_iter", 1), _grn_v1(A, r, 513))


def relu_term_risk(B) -> tuple[float, np.ndarray]:
    """min_w E||B x - relu(w^T x) x||^2 for x ~ N(0, I_d), and the minimising w (DCA Eq. B.9).

    E[relu(w^T x) x x^T] = (||w|| I + w w^T/||w||)/sqrt(2 pi) (Lemma B.1, Eq. B.7) and
    E[relu(w^T x)^2 ||x||^2] = ||w||^2 (d+2)/2: the paper's Eq. B.6 prints (d+1)/2, but its
    own proof sums 3/2 + (d-1)/2 = (d+2)/2 (checked by Monte Carlo in the tests). With
    c = tr(B) + lambda_max((B + B^T)/2) the minimum is ||B||_F^2 - max(c, 0)^2/(pi (d+2)), at
    w = sqrt(2/pi) c/(d+2) times the top eigenvector (w = 0 when c <= 0).
    """
    B = _square(B, "B")
    d = B.shape[0]
    evals, evecs = np.linalg.eigh((B + B.T) / 2.0)
    c = float(np.trace(B) + evals[-1])
    base = float(np.sum(B ** 2))
    if c <= 0.0:
        return base, np.zeros(d)
    w = math.sqrt(2.0 / math.pi) * c / (d + 2) * evecs[:, -1]
    return base - c * c / (math.pi * (d + 2)), w


def _relu_gram(w: np.ndarray) -> np.ndarray:
    """E[relu(w^T x) x x^T] for x ~ N(0, I) (Lemma B.1, Eq. B.7)."""
    n = float(np.linalg.norm(w))
    if n == 0.0:
        return np.zeros((w.size, w.size))
    return (n * np.eye(w.size) + np.outer(w, w) / n) / math.sqrt(2.0 * math.pi)


def optimal_grn_v3(A, ranks: Ranks, *, max_iter: int = 300) -> ClassOptimum:
    """Best excess risk over Thm 4.1's GRN-v3 subclass x -> (D + M) x + relu(w^T x) x, x ~ N(0, I).

    Thm 4.1 only gives C_GRN-v3 ⊃ {(D + M) x + relu(w^T x) x}, so this is an upper bound on
    ER*(C_GRN-v3), with the Gaussian inputs of Lemma B.1. The risk is ||A - D - M - K_w||_F^2
    - ||K_w||_F^2 + ||w||^2 (d+2)/2 with K_w = E[relu(w^T x) x x^T] (Eq. B.5), so M is
    eliminated by Eckart-Young and (D, w) minimised by BFGS, starting from the best of the
    GRN-v2 optimum and App. B's choices 1 and 2 (each with its optimal w, `relu_term_risk`),
    then polished by exact alternating steps. The starts are kept if nothing beats them, so
    the value is <= Theorem 4.2's GRN-v3 bound (with the corrected (d+2) constant, see
    `relu_term_risk`) and <= `optimal_grn_v2`'s.
    """
    A = _square(A)
    d = A.shape[0]
    r = _rank(ranks, d, strict=False)
    return _grn_v3(A, r, _dim(max_iter, "max_iter", 1), None)


def _grn_v3(A: np.ndarray, r: int, max_iter: int, v2: ClassOptimum | None) -> ClassOptimum:
    d = A.shape[0]
    if r == d:
        return ClassOptimum(0.0, A.copy(), A - np.eye(d), np.ones(d), np.zeros(d))
    if v2 is None:
        v2 = _grn_v2(A, r, max_iter, _grn_v1(A, r, 513))
    delta, u_perp = _delta(A, r)
    Mr = A - np.eye(d) - delta  # U_r Sigma_r V_r^T
    alpha = 1.0 + np.trace(delta) / (d - r)
    cw = (d + 2) / 2.0 - (d + 3) / (2.0 * math.pi)  # ||w||^2 (d+2)/2 - ||K_w||_F^2 = cw ||w||^2
    root = math.sqrt(2.0 * math.pi)

    def objective(z):
        D, w = z[:d], z[d:]
        U, s, Vt = np.linalg.svd(A - np.diag(D) - _relu_gram(w))
        R = (U[:, r:] * s[r:]) @ Vt[r:]
        n = float(np.linalg.norm(w))
        grad_w = 2.0 * cw * w
        if n > 0.0:
            dK = (np.trace(R) * w + (R + R.T) @ w) / n - (w @ R @ w) * w / n ** 3
            grad_w = grad_w - 2.0 * dK / root
        return float(np.sum(s[r:] ** 2)) + cw * n * n, np.concatenate([-2.0 * np.diag(R), grad_w])

    best = None
    for D, M in ((v2.diagonal, v2.low_rank),
                 (np.full(d, alpha), Mr + (1.0 - alpha) * (np.eye(d) - u_perp @ u_perp.T)),  # choice 1
                 (np.diag(np.eye(d) + delta), Mr)):  # choice 2
        err, w = relu_term_risk(A - np.diag(D) - M)
        if best is None or err < best[0]:
            best = (err, np.array(D, dtype=float), M, w)
    z = _bfgs(objective, np.concatenate([best[1], best[3]]), max_iter, float(np.linalg.norm(A)))
    err, D, M, w = _alternate(A, r, z[:d].copy(), z[d:].copy(), 20)
    if err < best[0]:
        best = (err, D, M, w)
    if v2.excess_risk <= best[0]:  # w = 0 is in the subclass (guards rounding at ~0)
        best = (v2.excess_risk, v2.diagonal, v2.low_rank, np.zeros(d))
    err, D, M, w = best
    return ClassOptimum(float(err), np.diag(D) + M, M, D, w)


@dataclass(frozen=True, eq=False)
class ClassOptima:
    """`ClassOptimum` of every architecture of DCA Thm 4.1 for one target and set of ranks."""

    baseline: ClassOptimum
    resnet: ClassOptimum
    grn_v1: ClassOptimum
    grn_v2: ClassOptimum
    grn_v3: ClassOptimum


def optimal_excess_risks(A, ranks: Ranks, *, max_iter: int = 300) -> ClassOptima:
    """All five classes at once (`optimal_baseline` ... `optimal_grn_v3`), sharing the work.

    By construction ER(grn_v3) <= ER(grn_v2) <= ER(grn_v1) <= ER(resnet), as the classes
    are nested (w = 0, D = alpha I, alpha = 1).
    """
    A = _square(A)
    d = A.shape[0]
    r = _rank(ranks, d, strict=False)
    max_iter = _dim(max_iter, "max_iter", 1)
    v1 = _grn_v1(A, r, 513)
    v2 = _grn_v2(A, r, max_iter, v1)
    return ClassOptima(optimal_baseline(A, ranks), optimal_resnet(A, r), v1, v2,
                       _grn_v3(A, r, max_iter, v2))


# --------------------------------------------------------------------------- DCA, Thm 4.2

@dataclass(frozen=True)
class ExcessRiskBounds:
    """Theorem 4.2: ER*(C_res) exactly, and upper bounds on ER* of GRN-v1, -v2, -v3."""

    resnet: float
    grn_v1: float
    grn_v2: float
    grn_v3: float


def excess_risk_bounds(A, ranks: Ranks, *, as_printed: bool = False) -> ExcessRiskBounds:
    """DCA Theorem 4.2 for target A and collective rank r_* (< d), with Delta as in the theorem.

    ER*(res) = ||Delta||^2; ER*(v1) <= ||Delta||^2 - tr(Delta)^2/(d - r_*); ER*(v2) <=
    ||Delta||^2 - max(sum_i Delta_ii^2, tr(Delta)^2/(d - r_*)); ER*(v3) <= ||Delta||^2 -
    max(T1, T2), T1 = tr(Delta)^2/(d - r_*) + nu_max^2/(pi(d+1)), T2 = sum_i Delta_ii^2 +
    nu~_max^2/(pi(d+1)). The statement prints nu_max's matrix as "(Delta + Delta^perp)/2 - ...";
    read as (Delta + Delta^T)/2 - tr(Delta)/(d - r_*) U_perp U_perp^T, as in App. B (B.10).
    The v3 bound assumes x ~ N(0, I) (Lemma B.1). Its pi (d+1) comes from Lemma B.1's
    arithmetic slip (see `relu_term_risk`); by default it is pi (d+2), which makes the bound
    exactly the risk of App. B's choices 1 and 2; as_printed=True keeps pi (d+1).
    """
    A = _square(A)
    d = A.shape[0]
    r = _rank(ranks, d, strict=True)
    delta, u_perp = _delta(A, r)
    fro2 = float(np.sum(delta ** 2))
    tr = float(np.trace(delta))
    t_alpha = tr * tr / (d - r)
    t_diag = float(np.sum(np.diag(delta) ** 2))
    sym = (delta + delta.T) / 2.0
    nu = float(np.linalg.eigvalsh(sym - tr / (d - r) * (u_perp @ u_perp.T))[-1])
    nu_t = float(np.linalg.eigvalsh(sym - np.diag(np.diag(delta)))[-1])
    c = math.pi * (d + 1 if as_printed else d + 2)
    return ExcessRiskBounds(
        resnet=fro2,
        grn_v1=fro2 - t_alpha,
        grn_v2=fro2 - max(t_diag, t_alpha),
        grn_v3=fro2 - max(t_alpha + nu * nu / c, t_diag + nu_t * nu_t / c),
    )


# --------------------------------------------------------------------------- DCA, Thm 4.3

def parameter_count(d: int, ranks: Sequence[int], model: str = "resnet") -> int:
    """Parameters of the T-layer low-rank model (DCA Sec. 4.2 and App. C.1).

    resnet 2 d r_*; grn_v1 2 d r_* + T(T-1)/2; grn_v2 2 d r_* + d T(T-1)/2;
    grn_v3 2 d r_* + d T(T-1)/2 + d T.
    """
    d = _dim(d)
    if isinstance(ranks, (int, np.integer)):
        raise ValueError("ranks must be the sequence of per-layer ranks r_t (T = its length)")
    r = collective_rank(ranks)
    T = len(list(ranks))
    extra = {"resnet": 0, "grn_v1": T * (T - 1) // 2, "grn_v2": d * T * (T - 1) // 2,
             "grn_v3": d * T * (T - 1) // 2 + d * T}
    if model not in extra:
        raise ValueError(f"model must be one of {sorted(extra)}, got {model!r}")
    return 2 * d * r + extra[model]


@dataclass(frozen=True)
class RankThresholds:
    """One collective rank per GRN variant: Thm 4.3(i)'s thresholds or Lemma C.1's lower bounds."""

    grn_v1: np.ndarray | float
    grn_v2: np.ndarray | float
    grn_v3: np.ndarray | float


def _eta(d: int, kappa: np.ndarray, as_printed: bool) -> np.ndarray:
    xi0 = 1.0 / (math.pi * (d + (1 if as_printed else 2)) * (d - 1))
    return np.sqrt(((kappa * (1 + xi0) - xi0) ** 2 + xi0) / (1 + xi0))


def rank_thresholds(d: int, kappa, *, as_printed: bool = False) -> RankThresholds:
    """Thresholds (4.1)-(4.3) of DCA Theorem 4.3(i), all in units of r_* (not r_*/d).

    (4.1) r_* <= d [(1 + kappa(sqrt(kappa^2 + 1) - kappa))^2 - 1]   (GRN-v1),
    (4.2) r_* <= (1 + kappa(sqrt(kappa^2 + d) - kappa))^2 - 1        (GRN-v2),
    (4.3) r_* <= (1 + eta(sqrt(eta^2 + d) - eta))^2 - 1.6            (GRN-v3),
    eta = sqrt(((kappa(1+xi0) - xi0)^2 + xi0)/(1+xi0)), xi0 = 1/(pi(d^2 - 1)).
    kappa = lambda_min/lambda_max of A - I (assumed PSD). Solving App. C's last quadratic
    exactly gives sqrt(eta^2 + d + 0.6) in (4.3); the printed sqrt(eta^2 + d) is kept (it is
    smaller, so still sufficient). With the (d+2) correction of Lemma B.1 (`relu_term_risk`),
    xi0 = 1/(pi (d+2)(d-1)) by default; as_printed=True uses the printed 1/(pi (d^2 - 1)).
    """
    d = _dim(d, "d", 2)
    k = _kappa(kappa)
    eta = _eta(d, k, as_printed)
    v1 = d * ((1 + k * (np.sqrt(k * k + 1) - k)) ** 2 - 1)
    v2 = (1 + k * (np.sqrt(k * k + d) - k)) ** 2 - 1
    v3 = (1 + eta * (np.sqrt(eta * eta + d) - eta)) ** 2 - 1.6
    if np.ndim(k) == 0:
        return RankThresholds(float(v1), float(v2), float(v3))
    return RankThresholds(v1, v2, v3)


def equal_parameter_rank_lower_bounds(d: int, r_star) -> RankThresholds:
    """Lemma C.1: least collective rank of a GRN with ResNet's 2 d r_* parameters.

    GRN-v1: r_* - (sqrt(d + r_*) - sqrt(d))^2; GRN-v2: r_* - (sqrt(1 + r_*) - 1)^2;
    GRN-v3: r_* - (sqrt(1.6 + r_*) - 1)^2. (The statement's "(sqrt d + r_* - sqrt d)^2" and
    "(sqrt 1 + r_* - 1)^2" are garbled; the square roots are read from the proof in C.1.)
    """
    d = _dim(d)
    r = _positive(r_star, "r_star", allow_zero=True)
    out = (r - (np.sqrt(d + r) - math.sqrt(d)) ** 2, r - (np.sqrt(1 + r) - 1) ** 2,
           r - (np.sqrt(1.6 + r) - 1) ** 2)
    if np.ndim(r) == 0:
        return RankThresholds(*(float(x) for x in out))
    return RankThresholds(*out)


@dataclass(frozen=True)
class GainBounds:
    """Lower bounds on G_k = ER*(C_res) - ER*(C_GRN-vk) at equal parameter count (Thm 4.3(ii))."""

    g1: np.ndarray | float
    g2: np.ndarray | float
    g3: np.ndarray | float


def gain_lower_bounds(d: int, r_star, lambda_min, lambda_max, *, as_printed: bool = False) -> GainBounds:
    """DCA Theorem 4.3(ii); broadcasts over array arguments.

    G1 >= (d - r_*) lmin^2 - (sqrt(d + r_*) - sqrt(d))^2 (lmax^2 - lmin^2),
    G2 >= (d - r_*) lmin^2 - (sqrt(1 + r_*) - 1)^2 (lmax^2 - lmin^2),
    G3 >= (d - 1/(pi(d+1)) - r_*) lmin^2 + lmax^2/(2 pi(d+1)) - (sqrt(1.6 + r_*) - 1)^2 (lmax^2 - lmin^2),
    with lmin <= lmax the extreme eigenvalues of A - I (assumed PSD). G1 >= 0 exactly when
    r_*/d is within threshold (4.1), G2 >= 0 exactly within (4.2). G3's pi (d+1) becomes
    pi (d+2) by default (Lemma B.1's correction, see `relu_term_risk`); as_printed=True keeps it.
    """
    d = _dim(d, "d", 2)
    r = _positive(r_star, "r_star", allow_zero=True)
    if np.any(r >= d):
        raise ValueError(f"r_star must be < d = {d} (the theorem assumes r_* < d)")
    lmin = _positive(lambda_min, "lambda_min", allow_zero=True)
    lmax = _positive(lambda_max, "lambda_max")
    if np.any(lmin > lmax):
        raise ValueError("lambda_min must be <= lambda_max")
    spread = lmax ** 2 - lmin ** 2
    eps = 1.0 / (math.pi * (d + 1 if as_printed else d + 2))
    g1 = (d - r) * lmin ** 2 - (np.sqrt(d + r) - math.sqrt(d)) ** 2 * spread
    g2 = (d - r) * lmin ** 2 - (np.sqrt(1 + r) - 1) ** 2 * spread
    g3 = (d - eps - r) * lmin ** 2 + eps / 2 * lmax ** 2 - (np.sqrt(1.6 + r) - 1) ** 2 * spread
    if np.ndim(g1) == 0:
        return GainBounds(float(g1), float(g2), float(g3))
    return GainBounds(g1, g2, g3)


def equal_error_collective_rank(d: int, r_star, kappa, *, as_printed: bool = False) -> tuple:
    """Proposition 4.4: collective rank at which GRN-v1/v2 (first) and GRN-v3 (second) match ResNet.

    r'_* = (r_* - d kappa^2)/(1 - kappa^2) and r~_* = (r_* - d eta^2)/(1 - eta^2), eta as in
    (4.3) (`as_printed` as there); values below 0 mean any rank does. kappa must be < 1.
    """
    d = _dim(d, "d", 2)
    r = _positive(r_star, "r_star", allow_zero=True)
    k = _kappa(kappa)
    if np.any(k >= 1):
        raise ValueError("kappa must be < 1 here (Prop. 4.4 divides by 1 - kappa^2)")
    eta = _eta(d, k, as_printed)
    return (r - d * k * k) / (1 - k * k), (r - d * eta * eta) / (1 - eta * eta)


@dataclass(frozen=True, eq=False)
class Figure5Curves:
    """Figure 5's curves: Thm 4.3(ii) gain lower bounds, rows indexed like `dims`.

    Left panel: gains vs `ratios` = r_*/d at lambda_min = 5, lambda_max = 10. Right panel:
    gains vs `kappas` at lambda_max = 10, r_* = 50 (lambda_min = 10 kappa).
    """

    dims: np.ndarray
    ratios: np.ndarray
    g1_vs_ratio: np.ndarray
    g2_vs_ratio: np.ndarray
    g3_vs_ratio: np.ndarray
    kappas: np.ndarray
    g1_vs_kappa: np.ndarray
    g2_vs_kappa: np.ndarray
    g3_vs_kappa: np.ndarray


def figure5_curves(dims: Sequence[int] = (128, 256, 512, 1024), *, points: int = 100,
                   lambda_min: float = 5.0, lambda_max: float = 10.0, r_star: float = 50.0,
                   as_printed: bool = False) -> Figure5Curves:
    """Arrays for DCA Figure 5 (the figure itself is not in the text; the dims are our choice).

    Left: G1, G2 (and G3) lower bounds vs r_*/d in [0, 0.99] (lambda_min = 5, lambda_max = 10);
    right: vs kappa in [0, 1] with lambda_max = 10 and r_* = 50 (needs every d > r_*).
    `as_printed` only affects G3 (see `gain_lower_bounds`).
    """
    dims_arr = np.array([_dim(int(x) if isinstance(x, (int, np.integer)) else x, "dims entry", 2)
                         for x in dims])
    if dims_arr.size == 0:
        raise ValueError("dims is empty; pass at least one dimension")
    if np.any(dims_arr <= r_star):
        raise ValueError(f"every d in dims must exceed r_star = {r_star} for the right panel")
    points = _dim(points, "points", 2)
    ratios = np.linspace(0.0, 0.99, points)
    kappas = np.linspace(0.0, 1.0, points)
    left = [gain_lower_bounds(int(d), ratios * d, lambda_min, lambda_max, as_printed=as_printed)
            for d in dims_arr]
    right = [gain_lower_bounds(int(d), r_star, kappas * lambda_max, lambda_max, as_printed=as_printed)
             for d in dims_arr]
    return Figure5Curves(
        dims=dims_arr, ratios=ratios,
        g1_vs_ratio=np.stack([g.g1 for g in left]), g2_vs_ratio=np.stack([g.g2 for g in left]),
        g3_vs_ratio=np.stack([g.g3 for g in left]),
        kappas=kappas,
        g1_vs_kappa=np.stack([g.g1 for g in right]), g2_vs_kappa=np.stack([g.g2 for g in right]),
        g3_vs_kappa=np.stack([g.g3 for g in right]),
    )


# --------------------------------------------------------------------------- tau paper

@dataclass(frozen=True, eq=False)
class NormGrowth:
    """Predicted E||h_l||^2 / ||h_0||^2 for l = 0..depth (index = number of residual blocks).

    `upper` = (1 + g tau^2)^l: the exact expectation without the ReLU, an upper bound with it.
    `lower`: Theorem 4's recursion for ReLU (equal to `upper` for activation='linear').
    """

    layer: np.ndarray
    upper: np.ndarray
    lower: np.ndarray
    activation: str


def predicted_norm_growth(depth: int, tau: float, *, activation: str = "relu",
                          weight_variance: float = 2.0) -> NormGrowth:
    """Forward-norm growth of h_l = phi(h_{l-1} + tau W_l h_{l-1}), W_l entries N(0, g/m) (tau paper).

    g = `weight_variance` (= m Var W_ij; 2 for the paper's Kaiming N(0, 2/m)). Given h,
    E||(I + tau W) h||^2 = (1 + g tau^2) ||h||^2 exactly at any width m (the cross term has
    mean 0), so the linear analogue has E||h_l||^2/||h_0||^2 = (1 + g tau^2)^l (the brief's
    (1 + tau^2)^L is the g = 1 case). With ReLU, relu(z)^2 <= z^2 makes that an upper bound.
    Lower bound (Theorem 4, App. G, Eqs. 53-55): E||h_l||^2 >= E||h_{l-1}||^2 and
    E||h_l||^2 >= (g/2) tau^2 sum_{a<l} E||h_a||^2 (which rests on the paper's claim that the
    summed pre-activations are symmetric), iterated as lower_l = max(lower_{l-1},
    (g/2) tau^2 sum_{a<l} lower_a). Dichotomy: tau = 1/sqrt(L) keeps upper_L <= e^g for all
    L (bounded, Thms 1-2), tau = L^(-1/4) makes lower_L grow without bound (Theorem 4, whose
    E||h_L||^2 > L^(2c) it implies; the final FC layer h_L = relu(W_L h_{L-1}) keeps E||h||^2).
    """
    depth = _dim(depth, "depth", 0)
    tau = float(_positive(tau, "tau", allow_zero=True))
    g = float(_positive(weight_variance, "weight_variance"))
    if activation not in ("relu", "linear"):
        raise ValueError(f"activation must be 'relu' or 'linear', got {activation!r}")
    layer = np.arange(depth + 1)
    upper = np.exp(layer * math.log1p(g * tau * tau))
    if activation == "linear":
        return NormGrowth(layer, upper, upper.copy(), activation)
    lower = np.empty(depth + 1)
    lower[0] = 1.0
    total = 1.0
    for l in range(1, depth + 1):
        lower[l] = max(lower[l - 1], 0.5 * g * tau * tau * total)
        total += lower[l]
    return NormGrowth(layer, upper, lower, activation)


# --------------------------------------------------------------------------- Cutting the Skip

def softmax(logits, temperature: float = 1.0) -> np.ndarray:
    """Row-wise softmax S_tau(M) = softmax(M / tau) (Cutting the Skip, Prop. 1)."""
    M = np.asarray(logits, dtype=float)
    if M.ndim != 2 or not np.all(np.isfinite(M)):
        raise ValueError(f"logits must be a finite 2-D matrix, got shape {M.shape}")
    t = float(_positive(temperature, "temperature"))
    z = M / t
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def softmax_condition(logits, temperature: float = 1.0) -> float:
    """2-norm condition number s_max/s_min of the row-wise softmax of a square logit matrix (Prop. 1).

    Returns inf when the softmax matrix is numerically singular.
    """
    M = np.asarray(logits, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"logits must be a square n x n matrix, got shape {M.shape}")
    s = np.linalg.svd(softmax(M, temperature), compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


@dataclass(frozen=True)
class SoftmaxConditionBounds:
    """Proposition 1 made explicit for given logits (derivations in `softmax_condition_bounds`)."""

    row_range: float
    diagonal_gap: float
    diffuse_lower: float
    dominant_upper: float


def softmax_condition_bounds(logits, temperature: float = 1.0) -> SoftmaxConditionBounds:
    """Both halves of Cutting the Skip's Proposition 1, with the constants we derived.

    Diffuse rows (row range Delta = max_i (max_j M_ij - min_j M_ij)): every entry is within
    (e^(Delta/tau) - 1)/n of 1/n, so sigma_2 <= ||S - 11^T/n||_F <= e^(Delta/tau) - 1 while
    sigma_1 >= 1 (S 1 = 1): kappa >= 1/(e^(Delta/tau) - 1) ~ tau/Delta (the paper's "≳ tau/Delta").
    Diagonal dominance (gap gamma = min_i (M_ii - max_{j != i} M_ij) > 0): off-diagonal entries
    are <= e^(-gamma/tau) and each row's off-diagonal mass <= delta = (n-1) e^(-gamma/tau), so
    ||S - I||_2 <= 2 delta =: eps and kappa <= (1 + eps)/(1 - eps) (the paper's unspecified
    eps(gamma/tau) -> 0); inf when eps >= 1 or gamma <= 0.
    """
    M = np.asarray(logits, dtype=float)
    if M.ndim != 2 or M.shape[0] != M.shape[1] or M.shape[0] < 2 or not np.all(np.isfinite(M)):
        raise ValueError(f"logits must be a finite square n x n matrix with n >= 2, got shape {M.shape}")
    t = float(_positive(temperature, "temperature"))
    n = M.shape[0]
    row_range = float(np.max(M.max(axis=1) - M.min(axis=1)))
    off = M + np.diag(np.full(n, -np.inf))
    gap = float(np.min(np.diag(M) - off.max(axis=1)))
    x = row_range / t
    diffuse = math.inf if x == 0 else 1.0 / math.expm1(x)
    eps = 2.0 * (n - 1) * math.exp(-gap / t) if gap > 0 else math.inf
    dominant = (1 + eps) / (1 - eps) if eps < 1 else math.inf
    return SoftmaxConditionBounds(row_range, gap, diffuse, dominant)


def sample_mimetic_logits(n: int, d: int, alpha: float, beta: float, rng=None, *,
                          tokens: str = "gaussian") -> np.ndarray:
    """Logits M = X (alpha Z + beta I) X^T with Z_ij ~ N(0, 1/d) (Cutting the Skip Eq. 11, App. A.2).

    tokens='gaussian': X in R^{n x d} with N(0, 1) entries, the setting of Eqs. 14-20.
    tokens='identity': X = I (needs n == d), i.e. M = alpha Z + beta I itself, the literal
    reading of A.2.1's "a square matrix M in R^{10x10}" with alpha, beta.
    """
    n = _dim(n, "n")
    d = _dim(d, "d")
    a = float(_positive(alpha, "alpha", allow_zero=True))
    b = float(np.asarray(beta, dtype=float))
    if not math.isfinite(b):
        raise ValueError(f"beta must be finite, got {beta!r}")
    gen = _rng(rng)
    W = a * gen.normal(0.0, 1.0 / math.sqrt(d), size=(d, d)) + b * np.eye(d)
    if tokens == "identity":
        if n != d:
            raise ValueError(f"tokens='identity' needs n == d (M = alpha Z + beta I), got n={n}, d={d}; "
                             f"use tokens='gaussian'")
        return W
    if tokens != "gaussian":
        raise ValueError(f"tokens must be 'gaussian' or 'identity', got {tokens!r}")
    X = gen.normal(size=(n, d))
    return X @ W @ X.T


def mimetic_attention_condition(n: int, d: int, alpha: float, beta: float, rng=None, *,
                                tokens: str = "gaussian", temperature: float = 1.0,
                                trials: int = 1) -> float:
    """Condition number of softmax(M) for mimetic logits (`sample_mimetic_logits`); median over `trials`.

    Appendix A.2.1 reports kappa ~ 1.1 for n = d = 10, alpha = 0.1, beta = 5 and ~730 for
    beta = 0 from one draw. With tokens='gaussian' the medians are about 1.1-1.2 and 6e2-8e2
    (single draws vary: X X^T is sometimes not diagonally dominant); with tokens='identity'
    about 1.07 and 1.6e3. Use trials > 1 for a stable number.
    """
    trials = _dim(trials, "trials")
    gen = _rng(rng)
    values = [softmax_condition(sample_mimetic_logits(n, d, alpha, beta, gen, tokens=tokens), temperature)
              for _ in range(trials)]
    return float(np.median(values))


@dataclass(frozen=True)
class MimeticLogitStatistics:
    """Mean and variance of diagonal, off-diagonal and gap entries of C = alpha X Z X^T + beta X X^T."""

    diag_mean: float
    diag_var: float
    offdiag_mean: float
    offdiag_var: float
    gap_mean: float
    gap_var: float


def mimetic_logit_statistics(d: int, alpha: float, beta: float, *, as_printed: bool = False) -> MimeticLogitStatistics:
    """Eqs. 18-20 of Cutting the Skip: moments of C = alpha B + beta A, A = X X^T, B = X Z X^T.

    X rows x_i ~ N(0, I_d), Z_ij ~ N(0, 1/d). Exact moments (default): C_ii has mean beta d and
    variance alpha^2 (d + 2) + 2 beta^2 d (Eq. 18 as printed); C_ij (i != j) has mean 0 and
    variance (alpha^2 + beta^2) d, since Var(x_i^T Z x_j) = sum_ab E[x_a^2 y_b^2]/d = d; and
    gamma = C_ii - C_ij has mean beta d and variance alpha^2 (2d + 2) + 3 beta^2 d (all
    covariances are exactly 0). as_printed=True returns the paper's Eqs. 17, 19, 20, which use
    Var(B_ij) ~ 1: off-diagonal variance alpha^2 + beta^2 d and gap variance alpha^2 (d + 3) +
    3 beta^2 d; they agree with the exact values when alpha = 0.
    """
    d = _dim(d)
    a = float(_positive(alpha, "alpha", allow_zero=True))
    b = float(np.asarray(beta, dtype=float))
    diag_var = a * a * (d + 2) + 2 * b * b * d
    b_off = 1.0 if as_printed else float(d)
    off_var = a * a * b_off + b * b * d
    return MimeticLogitStatistics(b * d, diag_var, 0.0, off_var, b * d, diag_var + off_var)
