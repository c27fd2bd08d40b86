"""Datasets: shapes, dtypes, determinism, the properties each generator promises, and no network."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import explorer
from explorer import ExperimentSpec, SpecError
from explorer.data import Dataset, build_dataset, dims

# Small configurations so every dataset builds in well under a second.
SMALL = {
    "whitened-regression": {"dim": 8, "n_train": 64, "n_val": 16, "rank": 4},
    "identity": {"dim": 6, "n_train": 50, "n_val": 20},
    "affine": {"dim": 6, "n_train": 50, "n_val": 20},
    "spirals": {"n_train": 100, "n_val": 50},
    "digits": {},
    "mnist1d": {"num_samples": 200},
}

# Datasets read from a folder the user names are tested with tiny files in test_images.py.
DATASET_NAMES = [name for name, entry in explorer.registry("datasets").items() if entry.param("path") is None]


def data_section(name: str, **params):
    """A validated data section (the model is irrelevant for the data alone)."""
    raw = {"name": name, **SMALL.get(name, {}), **params}
    return ExperimentSpec.from_dict({"data": raw}).data


def fresh(name: str, **params) -> Dataset:
    """Build without the module's cache, so determinism checks compare two real generations."""
    explorer.data.clear_cache()
    return build_dataset(data_section(name, **params))


@pytest.fixture(autouse=True)
def _clear_cache():
    explorer.data.clear_cache()
    yield
    explorer.data.clear_cache()


def test_small_configs_cover_the_expected_datasets():
    assert set(SMALL) <= set(DATASET_NAMES)


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_dataset_builds_with_declared_shapes_and_dtypes(name):
    section = data_section(name)
    declared = dims(section)
    input_dim, output_dim, task = declared.input_dim, declared.output_dim, declared.task
    data = build_dataset(section)
    assert isinstance(data, Dataset)
    assert data.dims == declared
    assert data.name == name
    assert task in ("regression", "classification")
    for x, y in (data.split("train"), data.split("val")):
        assert tuple(x.shape[1:]) == declared.input_shape and x[0].numel() == input_dim
        assert x.dtype == torch.float32
        assert len(y) == len(x) > 0
        assert torch.isfinite(x).all()
        if task == "regression":
            assert y.shape == (len(x), output_dim)
            assert y.dtype == torch.float32
            assert torch.isfinite(y).all()
        else:
            assert y.shape == (len(x),)
            assert y.dtype == torch.int64
            assert int(y.min()) >= 0 and int(y.max()) < output_dim
    assert data.n_train == len(data.x_train) and data.n_val == len(data.x_val)


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_same_seed_gives_identical_tensors(name):
    a = fresh(name, seed=3)
    b = fresh(name, seed=3)
    assert a is not b
    for ta, tb in zip((a.x_train, a.y_train, a.x_val, a.y_val), (b.x_train, b.y_train, b.x_val, b.y_val)):
        assert torch.equal(ta, tb)


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_different_data_seed_gives_different_data(name):
    a = fresh(name, seed=0)
    b = fresh(name, seed=1)
    assert a.x_train.shape == b.x_train.shape
    assert not torch.equal(a.x_train, b.x_train)


def test_training_seed_does_not_change_the_data():
    base = ExperimentSpec.from_dict({"data": {"name": "identity", **SMALL["identity"]}})
    a = build_dataset(base.data)
    explorer.data.clear_cache()
    b = build_dataset(base.with_values({"train.seed": 99}).data)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_val, b.y_val)


# ---- whitened regression ---------------------------------------------------------------


@pytest.mark.parametrize("dim, n_train", [(8, 64), (5, 5), (3, 200)])
def test_whitened_inputs_have_identity_covariance(dim, n_train):
    data = fresh("whitened-regression", dim=dim, n_train=n_train, rank=min(2, dim))
    x = data.x_train.double()
    assert x.shape == (n_train, dim)
    cov = x.T @ x / n_train
    assert torch.allclose(cov, torch.eye(dim, dtype=torch.float64), atol=1e-4, rtol=0)


@pytest.mark.parametrize("rank", [0, 1, 3, 8])
def test_whitened_target_map_has_requested_rank(rank):
    dim = 8
    data = fresh("whitened-regression", dim=dim, n_train=64, n_val=32, rank=rank)
    x, y = data.x_train.double(), data.y_train.double()
    # Least squares Y = X M; M = A^T (exact since the targets are noiseless and X has full column rank)
    m = torch.linalg.lstsq(x, y).solution
    assert torch.allclose(x @ m, y, atol=1e-4)
    s = torch.linalg.svdvals(m)
    assert int((s > 1e-3).sum()) == rank
    assert (s[rank:] < 1e-4).all()
    if rank:
        # the documented spread of the non-zero singular values: [0.5, 1.5]
        assert s[:rank].min() > 0.5 - 1e-4 and s[:rank].max() < 1.5 + 1e-4
    # validation targets come from the same map
    assert torch.allclose(data.x_val.double() @ m, data.y_val.double(), atol=1e-4)


def test_whitened_n_train_below_dim_is_a_spec_error():
    with pytest.raises(SpecError) as info:
        ExperimentSpec.from_dict({"data": {"name": "whitened-regression", "dim": 8, "n_train": 4}})
    assert info.value.path == "data.n_train"


def test_whitened_rank_above_dim_is_a_spec_error():
    with pytest.raises(SpecError) as info:
        ExperimentSpec.from_dict({"data": {"name": "whitened-regression", "dim": 8, "rank": 9}})
    assert info.value.path == "data.rank"


# ---- identity and affine ---------------------------------------------------------------


def test_identity_targets_equal_inputs():
    data = fresh("identity")
    assert torch.equal(data.y_train, data.x_train)
    assert torch.equal(data.y_val, data.x_val)
    assert data.y_train.data_ptr() != data.x_train.data_ptr()  # a copy, not the same storage


def test_affine_targets_are_an_affine_function_of_inputs():
    data = fresh("affine")
    x = torch.cat([data.x_train, data.x_val]).double()
    y = torch.cat([data.y_train, data.y_val]).double()
    design = torch.cat([x, torch.ones(len(x), 1, dtype=torch.float64)], dim=1)
    coef = torch.linalg.lstsq(design, y).solution
    residual = (design @ coef - y).norm() / y.norm()
    assert residual < 1e-5
    # ... and genuinely affine: not the identity, with a non-zero offset
    assert not torch.allclose(data.y_train, data.x_train)
    assert coef[-1].abs().max() > 1e-2


# ---- classification datasets -----------------------------------------------------------


def test_digits_has_1797_examples_and_10_classes():
    data = fresh("digits")
    assert data.n_train + data.n_val == 1797
    labels = torch.cat([data.y_train, data.y_val])
    assert set(labels.tolist()) == set(range(10))
    assert data.output_dim == 10 and data.input_dim == 64
    # the validation share follows val_fraction
    assert data.n_val == round(0.2 * 1797)
    # standardised with training statistics
    assert torch.allclose(data.x_train.mean(0), torch.zeros(64), atol=1e-4)


def test_digits_are_sklearns_digits_read_without_importing_sklearn():
    """The shipped file parsed directly is exactly load_digits (pixels and labels), and building the digits
    dataset in a fresh process does not import scikit-learn (2.4 s of a fresh worker's first run)."""
    import subprocess
    import sys

    from sklearn.datasets import load_digits

    from explorer.data.tabular import digits_arrays

    images, labels = digits_arrays()
    reference = load_digits()
    np.testing.assert_array_equal(images, reference.images.astype(np.float32))
    np.testing.assert_array_equal(labels, reference.target)
    assert not images.flags.writeable  # shared by every build: nobody may change it
    probe = ("import sys, explorer; from explorer.data import build_dataset; "
             "build_dataset(explorer.ExperimentSpec.default().data); print('sklearn' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "False", done.stderr[-2000:]


def test_digits_val_fraction():
    data = fresh("digits", val_fraction=0.5)
    assert data.n_val == round(0.5 * 1797)
    assert data.n_train + data.n_val == 1797


@pytest.mark.parametrize("n_train, n_val", [(100, 50), (2, 2), (1000, 500)])
def test_spirals_labels_balanced(n_train, n_val):
    data = fresh("spirals", n_train=n_train, n_val=n_val)
    for y in (data.y_train, data.y_val):
        counts = torch.bincount(y, minlength=2)
        assert counts.tolist() == [len(y) // 2, len(y) // 2]


def test_mnist1d_classes():
    data = fresh("mnist1d")
    labels = torch.cat([data.y_train, data.y_val])
    assert set(labels.tolist()) == set(range(10))
    assert data.input_dim == 40


def test_mnist1d_num_samples_is_honoured_or_rejected():
    try:
        section = data_section("mnist1d", num_samples=205)
    except SpecError as err:
        assert err.path == "data.num_samples"
        return
    data = build_dataset(section)
    assert data.n_train + data.n_val == 205


def test_mnist1d_keeps_numpy_global_random_state():
    np.random.seed(1234)
    before = np.random.get_state()
    fresh("mnist1d")
    after = np.random.get_state()
    assert before[0] == after[0]
    assert np.array_equal(before[1], after[1])
    assert before[2:] == after[2:]
    # and the global stream continues where it was
    expected = np.random.RandomState()
    expected.set_state(before)
    assert np.random.rand() == expected.rand()


def test_mnist1d_keeps_python_global_random_state():
    random.seed(1234)
    before = random.getstate()
    fresh("mnist1d")
    assert random.getstate() == before


@pytest.mark.parametrize("name", DATASET_NAMES)
def test_building_keeps_torch_global_random_state(name):
    before = torch.get_rng_state()
    fresh(name)
    assert torch.equal(torch.get_rng_state(), before)


# ---- Dataset.batch ---------------------------------------------------------------------


def _rows_in(rows: torch.Tensor, table: torch.Tensor) -> bool:
    return bool((rows[:, None, :] == table[None, :, :]).all(-1).any(-1).all())


@pytest.mark.parametrize("split", ["train", "val"])
def test_batch_returns_n_examples_from_the_split(split):
    data = fresh("identity", n_train=50, n_val=20)
    x_all, y_all = data.split(split)
    n = 7
    x, y = data.batch(n, split=split)
    assert x.shape == (n, x_all.shape[1]) and len(y) == n
    assert _rows_in(x, x_all)
    assert torch.equal(x, y)  # identity: pairs stay aligned
    assert len({tuple(r.tolist()) for r in x}) == n  # no example twice


def test_batch_keeps_inputs_and_targets_aligned():
    data = fresh("affine", n_train=50, n_val=20)
    x, y = data.batch(9)
    pairs = torch.cat([data.x_train, data.y_train], dim=1)
    assert _rows_in(torch.cat([x, y], dim=1), pairs)


@pytest.mark.parametrize("extra", [0, 1, 1000])
def test_batch_larger_than_split_returns_whole_split(extra):
    data = fresh("spirals", n_train=100, n_val=50)
    x, y = data.batch(data.n_val + extra, split="val")
    assert torch.equal(x, data.x_val) and torch.equal(y, data.y_val)


def test_batch_with_generator_is_reproducible():
    data = fresh("identity", n_train=50, n_val=20)
    a = data.batch(10, generator=torch.Generator().manual_seed(5))[0]
    b = data.batch(10, generator=torch.Generator().manual_seed(5))[0]
    assert torch.equal(a, b)


def test_split_rejects_unknown_name():
    with pytest.raises(ValueError):
        fresh("identity").split("test")


# ---- no network ------------------------------------------------------------------------


def test_no_dataset_touches_the_network(no_network):
    for name in DATASET_NAMES:
        explorer.data.clear_cache()
        data = build_dataset(data_section(name))
        assert data.n_train > 0



def test_a_stored_spec_reading_outside_the_allowed_folders_opens_but_does_not_run(tmp_path):
    """On a server that reads dataset files only from its own folders, a run recorded on a text file elsewhere
    still opens (form only); whether it can run here is the one-line data.path refusal, before anything is read."""
    from explorer.data.files import restrict_reads

    text = tmp_path / "elsewhere" / "corpus.txt"
    text.parent.mkdir()
    text.write_text("some text to model, repeated. " * 40)
    raw = {"data": {"name": "text", "path": str(text), "context": 8}, "model": {"name": "gpt", "depth": 1, "width": 16}}
    ExperimentSpec.from_dict(raw).check_runnable()  # readable while reads are not restricted
    (tmp_path / "served").mkdir()
    restrict_reads([tmp_path / "served"])
    try:
        with pytest.raises(SpecError) as new:
            ExperimentSpec.from_dict(raw)
        assert new.value.path == "data.path"
        stored = ExperimentSpec.from_dict(raw, runnable=False)
        with pytest.raises(SpecError) as refused:
            stored.check_runnable(device="cpu")
        assert refused.value.path == "data.path" and "EXPLORER_DATA_DIR" in refused.value.message
        assert "\n" not in str(refused.value)
    finally:
        restrict_reads(None)
