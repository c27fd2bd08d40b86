"""What every dataset shares: the registry, the Dataset and its dimensions, the build cache and the task loss.

Generated datasets are cached (least recently used first out, at most EXPLORER_DATA_CACHE_MB in all),
and the cache is private: each caller gets its own copy of the tensors, so a run (or a callback) that
changes its data in place changes nothing for any other run.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple

import torch
from torch import nn

from explorer.cache import LRUCache, megabytes_setting
from explorer.registries import Param, Registry

DATASETS = Registry("datasets")

TASKS = ("regression", "classification", "language-modeling")


class DataDims(NamedTuple):
    """What a model needs to know about its data before any is generated."""

    input_shape: tuple[int, ...]  # one example: (d,) for vectors, (C, H, W) for images
    output_dim: int  # regression targets' dimension, or number of classes
    task: str  # "regression" or "classification"

    @property
    def input_dim(self) -> int:
        """Number of input features (an image flattened)."""
        return math.prod(self.input_shape)

    @classmethod
    def of(cls, declared: tuple) -> DataDims:
        shape, output_dim, task = declared
        return cls(tuple(shape) if isinstance(shape, (tuple, list)) else (int(shape),), int(output_dim), task)


@dataclass
class Dataset:
    """Train/validation tensors plus what a model needs to know about them."""

    name: str
    task: str  # "regression" (MSE) or "classification" (cross-entropy)
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    input_shape: tuple[int, ...]  # one example's shape
    output_dim: int  # regression targets' dimension, or number of classes
    seed: int = 0
    masks_train: torch.Tensor | None = None  # per-pixel labels (N, H, W) for segmentation probes, if any
    masks_val: torch.Tensor | None = None

    def __post_init__(self) -> None:
        self._generator = torch.Generator().manual_seed(self.seed)

    def split(self, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        if split == "train":
            return self.x_train, self.y_train
        if split in ("val", "validation"):
            return self.x_val, self.y_val
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")

    def batch(self, n: int, split: str = "train", generator: torch.Generator | None = None):
        """A random batch of `n` examples (the whole split if n covers it): (inputs, targets)."""
        x, y = self.split(split)
        if n >= len(x):
            return x, y
        gen = generator if generator is not None else self._generator
        index = torch.randperm(len(x), generator=gen)[:n].to(x.device)
        return x[index], y[index]

    def to(self, device: torch.device | str) -> Dataset:
        """A copy of this dataset on `device` (tensors moved once, not per batch)."""
        tensors = (self.x_train, self.y_train, self.x_val, self.y_val)
        masks = [None if m is None else m.to(device) for m in (self.masks_train, self.masks_val)]
        return Dataset(self.name, self.task, *(t.to(device) for t in tensors), self.input_shape, self.output_dim,
                       self.seed, *masks)

    def copy(self) -> Dataset:
        """The same data in tensors of its own (what the cache hands out: nobody shares a tensor)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return Dataset(**{k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in values.items()})

    @property
    def nbytes(self) -> int:
        """Bytes its tensors take."""
        return sum(v.nbytes for v in vars(self).values() if isinstance(v, torch.Tensor))

    @property
    def dims(self) -> DataDims:
        return DataDims(self.input_shape, self.output_dim, self.task)

    @property
    def input_dim(self) -> int:
        return math.prod(self.input_shape)

    @property
    def n_train(self) -> int:
        return len(self.x_train)

    @property
    def n_val(self) -> int:
        return len(self.x_val)


def dims(section) -> DataDims:
    """(input_shape, output_dim, task) of a data section, without generating the data."""
    return DataDims.of(DATASETS[section.name].info.dims(section.params))


def build_dataset(section) -> Dataset:
    """The dataset a spec's data section describes: generated, or copied from the cache."""
    key = (section.name, tuple(sorted(section.params.items())))
    cached = _CACHE.get(key)
    if cached is not None:
        return cached.copy()
    params = dict(key[1])
    tensors = DATASETS[section.name].factory(**params)  # (x_train, y_train, x_val, y_val[, masks_train, masks_val])
    shape, output_dim, task = DataDims.of(DATASETS[section.name].info.dims(params))
    dataset = Dataset(section.name, task, *tensors[:4], shape, output_dim, params.get("seed", 0), *tensors[4:])
    _remember(key, dataset)
    return dataset.copy()


cache_limit_bytes = megabytes_setting("EXPLORER_DATA_CACHE_MB")
cache_limit_bytes.__doc__ = "EXPLORER_DATA_CACHE_MB (default 256) in bytes: what the dataset cache may hold in all."


def cached_bytes() -> int:
    """Bytes the dataset cache holds now."""
    return _CACHE.nbytes


def clear_cache() -> None:
    """Forget every built dataset (the next build_dataset generates or reads it again)."""
    _CACHE.clear()


def _remember(key, dataset: Dataset) -> None:
    """Keep `dataset`, dropping the least recently used ones past the byte limit (one too big is not kept)."""
    _CACHE.put(key, dataset)


_CACHE = LRUCache(cache_limit_bytes, size_of=lambda dataset: dataset.nbytes)


SEED = Param("seed", "int", 0, "seed of the data generator (independent of the training seed)", low=0, high=2**31 - 1)


def loss_function(task: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Cross-entropy for classification and for next-token prediction (averaged over every position);
    0.5 * squared error summed over outputs, averaged over examples, for regression."""
    if task == "classification":
        return nn.functional.cross_entropy
    if task == "language-modeling":
        return lambda out, target: nn.functional.cross_entropy(out.flatten(0, -2), target.flatten())
    return lambda out, target: 0.5 * (out - target).pow(2).sum(-1).mean()
