"""Offline datasets as tensors: every dataset is generated, shipped by a package, or read locally.

`build_dataset(section)` returns a `Dataset` with train and validation tensors. Data are
deterministic from the section's own `seed` (independent of the training seed, so runs
with different training seeds see the same problem). Built datasets are cached, bounded by
bytes, and each caller gets its own copy. The shared pieces live in `explorer.data.base`;
importing this package registers every dataset.
"""

from explorer.data.base import (DATASETS, SEED, TASKS, DataDims, Dataset, build_dataset, cached_bytes, clear_cache,
                                 dims, loss_function)
from explorer.data import synthetic, tabular, images, text  # noqa: E402,F401,I001  (register the datasets)

__all__ = ["DATASETS", "SEED", "TASKS", "DataDims", "Dataset", "build_dataset", "cached_bytes", "clear_cache", "dims",
           "loss_function"]
