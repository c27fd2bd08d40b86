"""Small real datasets shipped by packages (no download): sklearn digits, MNIST-1D."""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from explorer.data.base import DATASETS, SEED
from explorer.registries import Param

VAL_FRACTION = Param("val_fraction", "float", 0.2, "share of examples held out for validation", low=0.05, high=0.9)


def _split_standardize(x: np.ndarray, y: np.ndarray, val_fraction: float, seed: int):
    """Shuffle with the seed, split, and standardise features with the training statistics."""
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order].astype(np.float32), y[order].astype(np.int64)
    n_val = max(1, int(round(val_fraction * len(x))))
    x_train, x_val, y_train, y_val = x[n_val:], x[:n_val], y[n_val:], y[:n_val]
    mean, std = x_train.mean(0), x_train.std(0)
    std[std < 1e-6] = 1.0
    x_train, x_val = (x_train - mean) / std, (x_val - mean) / std
    return tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in (x_train, y_train, x_val, y_val))


@DATASETS.register("digits", "sklearn's 8x8 handwritten digits as 64-d vectors, 10 classes (1797 images)",
                   (VAL_FRACTION, SEED), dims=lambda p: (64, 10, "classification"))
def digits(val_fraction: float, seed: int):
    """scikit-learn's bundled digits (no download), standardised per pixel."""
    images, target = digits_arrays()
    return _split_standardize(images.reshape(len(images), -1), target, val_fraction, seed)


@lru_cache(maxsize=1)
def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """sklearn's digits as read-only arrays: images (1797, 8, 8) float32 0..16, labels int64 (parsed once).

    Read from the file scikit-learn ships them in (sklearn/datasets/data/digits.csv.gz: 64 pixels and the
    label per row, what `load_digits` parses) without importing scikit-learn, whose import takes 2.4 s: the
    first run of a fresh process (a CLI call, an app worker) paid it before its first step. Where that file
    is not, `load_digits` itself."""
    found = importlib.util.find_spec("sklearn")
    path = Path(found.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz" if found else None
    if path is not None and path.is_file():
        table = np.loadtxt(path, delimiter=",")
        flat, target = table[:, :-1], table[:, -1]
    else:
        from sklearn.datasets import load_digits

        bunch = load_digits()
        flat, target = bunch.data, bunch.target
    images, target = flat.reshape(-1, 8, 8).astype(np.float32), target.astype(np.int64)
    images.flags.writeable = target.flags.writeable = False
    return images, target


@DATASETS.register(
    "mnist1d",
    "MNIST-1D: 40-d one-dimensional digit signals, 10 classes, generated offline",
    (Param("num_samples", "int", 5000, "examples to generate (train and validation together)", low=20, high=200_000),
     VAL_FRACTION, SEED),
    dims=lambda p: (40, 10, "classification"),
)
def mnist1d(num_samples: int, val_fraction: float, seed: int):
    """Generated with mnist1d.make_dataset (never its download path); standardised."""
    import random

    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    # make_dataset makes num_samples // 10 per class: ask for enough, keep exactly num_samples
    args.num_samples, args.seed, args.train_split = -(-num_samples // 10) * 10, seed, 1.0
    states = np.random.get_state(), random.getstate()  # make_dataset reseeds both global generators
    try:
        data = make_dataset(args)
    finally:
        np.random.set_state(states[0])
        random.setstate(states[1])
    x, y = np.asarray(data["x"])[:num_samples], np.asarray(data["y"])[:num_samples]
    return _split_standardize(x, y, val_fraction, seed)
