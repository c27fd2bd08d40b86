"""Generated datasets: the linear case studies of ANCRe and DCA, and two spirals."""

from __future__ import annotations

import math

import torch

from explorer.data.base import DATASETS, SEED
from explorer.registries import Param, SpecError


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _whitened(n: int, d: int, gen: torch.Generator) -> torch.Tensor:
    """n x d inputs whose empirical covariance is exactly the identity: X^T X / n = I."""
    q, _ = torch.linalg.qr(torch.randn(n, d, generator=gen, dtype=torch.float64))
    return (q * math.sqrt(n)).float()


def _check_whitened(p):
    if p["n_train"] < p["dim"]:
        raise SpecError("data.n_train", f"whitening {p['dim']}-d inputs needs at least {p['dim']} training examples; "
                                        f"set data.n_train={p['dim']} or more (or lower data.dim)")
    if p["rank"] > p["dim"]:
        raise SpecError("data.rank", f"the target map is {p['dim']} x {p['dim']}, so its rank is at most {p['dim']}; "
                                     f"set data.rank={p['dim']} or less")


@DATASETS.register(
    "whitened-regression",
    "linear regression Y = A X with whitened inputs (ANCRe case study 3.1); A has a chosen rank",
    (
        Param("dim", "int", 8, "input and output dimension d", low=1, high=4096),
        Param("n_train", "int", 64, "training examples (at least dim, so the inputs can be whitened)", low=1, high=1_000_000),
        Param("n_val", "int", 64, "validation examples", low=1, high=1_000_000),
        Param("rank", "int", 4, "rank of the target map A (a rank below dim gives the zero directions of Theorem 3.2)", low=0, high=4096),
        SEED,
    ),
    dims=lambda p: (p["dim"], p["dim"], "regression"),
    check=_check_whitened,
)
def whitened_regression(dim: int, n_train: int, n_val: int, rank: int, seed: int):
    """Inputs with X^T X / n = I, the per-example form of the paper's X X^T = I.

    The loss is averaged over examples, so this is the paper's problem with X / sqrt(n).
    The target A = U diag(s) V^T has `rank` singular values spread over [0.5, 1.5] and the
    rest exactly zero.
    """
    gen = _gen(seed)
    x_train = _whitened(n_train, dim, gen)
    x_val = torch.randn(n_val, dim, generator=gen)
    u, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(dim, dim, generator=gen, dtype=torch.float64))
    s = torch.zeros(dim, dtype=torch.float64)
    s[:rank] = torch.linspace(1.5, 0.5, rank, dtype=torch.float64) if rank > 1 else 1.0
    a = (u * s) @ v.T
    return x_train, x_train @ a.T.float(), x_val, x_val @ a.T.float()


def _gaussian_task(dim, n_train, n_val, seed, affine: bool):
    gen = _gen(seed)
    x_train = torch.randn(n_train, dim, generator=gen)
    x_val = torch.randn(n_val, dim, generator=gen)
    if not affine:
        return x_train, x_train.clone(), x_val, x_val.clone()
    a = torch.randn(dim, dim, generator=gen)
    b = torch.randn(dim, generator=gen)
    return x_train, x_train @ a.T + b, x_val, x_val @ a.T + b


_GAUSSIAN_PARAMS = (
    Param("dim", "int", 100, "dimension d of inputs and targets", low=1, high=4096),
    Param("n_train", "int", 10_000, "training examples", low=1, high=1_000_000),
    Param("n_val", "int", 1000, "validation examples", low=1, high=1_000_000),
    SEED,
)


def _check_sign(p) -> None:
    if p.get("sign", 1) not in (1, -1):
        raise SpecError("data.sign", f"must be 1 (y = x) or -1 (y = -x), got {p['sign']}; set data.sign=1 or -1")


@DATASETS.register("identity", "learn the identity y = x (or y = -x) on Gaussian inputs (DCA Figure 1a)",
                   (*_GAUSSIAN_PARAMS,
                    Param("sign", "int", 1, "target y = sign * x: 1 for the identity, -1 for its negation "
                                            "(IDInit Figure 10's target -I)", low=-1, high=1)),
                   dims=lambda p: (p["dim"], p["dim"], "regression"), check=_check_sign)
def identity(dim: int, n_train: int, n_val: int, seed: int, sign: int = 1):
    """x ~ N(0, I_d), target y = sign * x."""
    x_train, y_train, x_val, y_val = _gaussian_task(dim, n_train, n_val, seed, affine=False)
    return x_train, sign * y_train, x_val, sign * y_val


@DATASETS.register("affine", "learn y = A x + b with A, b standard normal (DCA Figure 1b)", _GAUSSIAN_PARAMS,
                   dims=lambda p: (p["dim"], p["dim"], "regression"))
def affine(dim: int, n_train: int, n_val: int, seed: int):
    """x ~ N(0, I_d), target y = A x + b with A, b i.i.d. N(0, 1), fixed by the seed."""
    return _gaussian_task(dim, n_train, n_val, seed, affine=True)


@DATASETS.register(
    "spirals",
    "two interleaved spirals in the plane, two classes",
    (
        Param("n_train", "int", 1000, "training examples", low=2, high=1_000_000),
        Param("n_val", "int", 500, "validation examples", low=2, high=1_000_000),
        Param("turns", "float", 1.5, "how many turns each spiral makes", low=0.25, high=10.0),
        Param("noise", "float", 0.05, "standard deviation of the Gaussian jitter", low=0.0, high=5.0),
        SEED,
    ),
    dims=lambda p: (2, 2, "classification"),
)
def spirals(n_train: int, n_val: int, turns: float, noise: float, seed: int):
    """Points r(cos t, sin t) with r in [0.1, 1] on two spirals half a turn apart, plus noise."""
    gen = _gen(seed)

    def sample(n: int):
        labels = torch.arange(n) % 2
        r = 0.1 + 0.9 * torch.rand(n, generator=gen)
        angle = 2 * math.pi * turns * r + math.pi * labels
        points = torch.stack([r * torch.cos(angle), r * torch.sin(angle)], dim=1)
        return points + noise * torch.randn(n, 2, generator=gen), labels

    return (*sample(n_train), *sample(n_val))
