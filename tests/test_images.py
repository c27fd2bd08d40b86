"""Image datasets: digits-images, shapes, and MNIST / CIFAR-10 read from tiny files written in the real formats."""

from __future__ import annotations

import gzip
import os
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import explorer
from explorer import ExperimentSpec, SpecError
from explorer.data import Dataset, build_dataset, dims

# ---- helpers -----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _clear_cache():
    explorer.data.clear_cache()
    yield
    explorer.data.clear_cache()


def section(name: str, **params):
    return ExperimentSpec.from_dict({"data": {"name": name, **params}}).data


def fresh(name: str, **params) -> Dataset:
    explorer.data.clear_cache()
    return build_dataset(section(name, **params))


def per_image_normalised(x: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) images flattened with each channel scaled to zero mean, unit norm, the whole to unit norm.

    Equal for images related by a per-channel affine map with positive scales (a per-channel standardisation).
    """
    flat = x.reshape(len(x), x.shape[1], -1).double()
    flat = flat - flat.mean(2, keepdim=True)
    flat = flat / flat.norm(dim=2, keepdim=True).clamp_min(1e-12)
    return flat.reshape(len(x), -1) / x.shape[1] ** 0.5


def standardised(raw: np.ndarray, train: np.ndarray) -> torch.Tensor:
    """raw (N, C, H, W) standardised per channel with the statistics of `train` (what the loaders promise)."""
    train = train.astype(np.float64)
    mean = train.mean(axis=(0, 2, 3), keepdims=True)
    std = train.std(axis=(0, 2, 3), keepdims=True)
    std[std < 1e-6] = 1.0
    return torch.from_numpy((raw.astype(np.float64) - mean) / std).float()


# ---- MNIST files -------------------------------------------------------------------------


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.uint8)
    magic = (0x0803 if array.ndim == 3 else 0x0801) if magic is None else magic
    header = magic.to_bytes(4, "big") + b"".join(int(s).to_bytes(4, "big") for s in array.shape)
    return header + array.tobytes()


def write_mnist(folder, n_train=30, n_val=12, gz=("train-images-idx3-ubyte", "t10k-labels-idx1-ubyte"), seed=0):
    """Tiny MNIST files (some gzipped, some not); returns the raw arrays written."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train-images-idx3-ubyte": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train-labels-idx1-ubyte": (np.arange(n_train) % 10).astype(np.uint8)[rng.permutation(n_train)],
        "t10k-images-idx3-ubyte": rng.integers(0, 256, (n_val, 28, 28), dtype=np.uint8),
        "t10k-labels-idx1-ubyte": (np.arange(n_val) % 10).astype(np.uint8)[rng.permutation(n_val)],
    }
    os.makedirs(folder, exist_ok=True)
    for name, array in arrays.items():
        data = idx_bytes(array)
        if name in gz:
            with gzip.open(os.path.join(folder, name + ".gz"), "wb") as handle:
                handle.write(data)
        else:
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(data)
    return arrays


@pytest.fixture
def mnist_dir(tmp_path):
    folder = tmp_path / "mnist"
    return str(folder), write_mnist(folder)


# ---- CIFAR files -------------------------------------------------------------------------

CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]


def write_cifar(folder, per_batch=6, seed=0, protocol=2):
    """Tiny CIFAR-10 batches as the original: dicts of bytes keys, uint8 N x 3072 data, list labels."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    written = {}
    for name in CIFAR_BATCHES:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        batch = {b"batch_label": name.encode(), b"data": data, b"labels": labels,
                 b"filenames": [f"img{i}.png".encode() for i in range(per_batch)]}
        with open(os.path.join(folder, name), "wb") as handle:
            pickle.dump(batch, handle, protocol=protocol)
        written[name] = (data, np.array(labels))
    return written


@pytest.fixture
def cifar_dir(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    return str(folder), write_cifar(folder)


def image_specs(tmp_path):
    """Small sections of every image dataset (files written for mnist and cifar10)."""
    mnist_folder, cifar_folder = tmp_path / "m", tmp_path / "c"
    write_mnist(mnist_folder)
    write_cifar(cifar_folder)
    return {
        "digits-images": {"size": 16},
        "shapes": {"size": 16, "n_train": 60, "n_val": 20},
        "mnist": {"path": str(mnist_folder)},
        "cifar10": {"path": str(cifar_folder)},
    }


# ---- every image dataset -----------------------------------------------------------------


def test_image_datasets_are_registered():
    names = set(explorer.registry("datasets"))
    assert {"digits-images", "shapes", "mnist", "cifar10"} <= names


@pytest.mark.parametrize("name", ["digits-images", "shapes", "mnist", "cifar10"])
def test_shapes_and_dtypes_match_declared_dims(name, tmp_path):
    params = image_specs(tmp_path)[name]
    sec = section(name, **params)
    declared = dims(sec)
    assert len(declared.input_shape) == 3 and declared.task == "classification"
    data = build_dataset(sec)
    assert data.dims == declared
    for x, y in (data.split("train"), data.split("val")):
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert tuple(x.shape[1:]) == declared.input_shape
        assert y.shape == (len(x),) and len(x) > 0
        assert torch.isfinite(x).all()
        assert 0 <= int(y.min()) and int(y.max()) < declared.output_dim
    # standardised per channel with the training statistics
    channel_mean = data.x_train.double().mean((0, 2, 3))
    channel_std = data.x_train.double().std((0, 2, 3), correction=0)
    assert torch.allclose(channel_mean, torch.zeros_like(channel_mean), atol=1e-4)
    assert torch.allclose(channel_std, torch.ones_like(channel_std), atol=1e-3)


@pytest.mark.parametrize("name", ["digits-images", "shapes", "mnist", "cifar10"])
def test_same_seed_same_data_other_seed_other_data(name, tmp_path):
    params = image_specs(tmp_path)[name]
    if name in ("mnist", "cifar10"):  # the seed picks the random subsets
        params = {**params, "n_train": 10, "n_val": 5}
    a, b, c = fresh(name, seed=4, **params), fresh(name, seed=4, **params), fresh(name, seed=5, **params)
    assert a is not b
    for ta, tb in zip((a.x_train, a.y_train, a.x_val, a.y_val), (b.x_train, b.y_train, b.x_val, b.y_val)):
        assert torch.equal(ta, tb)
    assert a.x_train.shape == c.x_train.shape
    assert not torch.equal(a.x_train, c.x_train)


@pytest.mark.parametrize("name", ["digits-images", "shapes", "mnist", "cifar10"])
def test_building_keeps_global_random_states(name, tmp_path):
    params = image_specs(tmp_path)[name]
    torch_before = torch.get_rng_state()
    np.random.seed(7)
    numpy_before = np.random.rand()
    np.random.seed(7)
    fresh(name, **params)
    assert torch.equal(torch.get_rng_state(), torch_before)
    assert np.random.rand() == numpy_before


def test_no_image_dataset_touches_the_network(no_network, tmp_path):
    specs = image_specs(tmp_path)
    for name, params in specs.items():
        assert fresh(name, **params).n_train > 0


# ---- digits-images -----------------------------------------------------------------------


@pytest.mark.parametrize("size", [8, 16, 32])
def test_digits_images_sizes(size):
    data = fresh("digits-images", size=size)
    assert data.x_train.shape[1:] == (1, size, size)
    assert data.input_shape == (1, size, size) and data.output_dim == 10
    assert data.n_train + data.n_val == 1797
    assert data.n_val == round(0.2 * 1797)
    assert set(torch.cat([data.y_train, data.y_val]).tolist()) == set(range(10))


def test_digits_images_same_split_and_pixels_as_digits():
    images = fresh("digits-images", seed=3, val_fraction=0.3)
    vectors = fresh("digits", seed=3, val_fraction=0.3)
    assert torch.equal(images.y_train, vectors.y_train) and torch.equal(images.y_val, vectors.y_val)
    # per-pixel standardisation of the images gives back the per-pixel standardised vectors
    flat = images.x_train.reshape(images.n_train, -1).double()
    mean, std = flat.mean(0), flat.std(0, correction=0)
    std[std < 1e-6] = 1.0
    assert torch.allclose(((flat - mean) / std).float(), vectors.x_train, atol=1e-3)


def test_digits_images_are_bilinear_upsamplings_of_the_8x8_images():
    small = fresh("digits-images", size=8, seed=1)
    for size in (16, 32):
        big = fresh("digits-images", size=size, seed=1)
        assert torch.equal(big.y_train, small.y_train)
        expected = F.interpolate(small.x_train, size=(size, size), mode="bilinear", align_corners=False)
        # standardisation is per channel (affine), so each upsampled image is the same up to a shared affine map
        assert torch.allclose(per_image_normalised(big.x_train), per_image_normalised(expected), atol=1e-4)
        nearest = F.interpolate(small.x_train, size=(size, size), mode="nearest")
        assert not torch.allclose(per_image_normalised(big.x_train), per_image_normalised(nearest), atol=1e-2)


@pytest.mark.parametrize("size", [12, 64, 4])
def test_digits_images_invalid_size_is_a_spec_error(size):
    with pytest.raises(SpecError) as info:
        section("digits-images", size=size)
    assert info.value.path == "data.size"
    if size == 12:  # within the range, but not a size on offer: the message lists them
        assert "8, 16, 32" in info.value.message


# ---- shapes ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def shapes_data():
    explorer.data.clear_cache()
    data = build_dataset(section("shapes", n_train=200, n_val=500, seed=2))
    explorer.data.clear_cache()
    return data


def test_shapes_masks_have_image_layout_and_dtype(shapes_data):
    data = shapes_data
    for x, m in ((data.x_train, data.masks_train), (data.x_val, data.masks_val)):
        assert m is not None and m.dtype == torch.int64
        assert m.shape == (len(x), x.shape[2], x.shape[3])
        assert int(m.min()) == 0 and int(m.max()) <= len(explorer.data.images.SHAPES)


def test_shapes_mask_classes_match_labels(shapes_data):
    for y, m in ((shapes_data.y_train, shapes_data.masks_train), (shapes_data.y_val, shapes_data.masks_val)):
        for label, mask in zip(y.tolist(), m):
            values = set(mask.unique().tolist())
            assert values == {0, label + 1}, (label, values)


def test_shapes_every_class_and_background_present_in_500_images(shapes_data):
    m, y = shapes_data.masks_val, shapes_data.y_val
    assert len(y) == 500
    assert set(y.tolist()) == set(range(5))
    assert set(m.unique().tolist()) == set(range(6))  # background 0 and 1 + every class


def test_shapes_classes_balanced(shapes_data):
    for y in (shapes_data.y_train, shapes_data.y_val):
        counts = torch.bincount(y, minlength=5)
        assert int(counts.max() - counts.min()) <= 1


def test_shapes_object_pixels_are_what_the_mask_says(shapes_data):
    """Object pixels share one colour far from every background pixel: a colour threshold recovers the mask."""
    x, m = shapes_data.x_train, shapes_data.masks_train
    inside = m > 0
    worst_object_spread, worst_gap, agreements = 0.0, float("inf"), []
    for image, mask in zip(x, inside):
        pixels = image.reshape(3, -1).T  # (H*W, 3)
        flat = mask.reshape(-1)
        colour = pixels[flat].median(0).values
        distance = (pixels - colour).norm(dim=1)
        worst_object_spread = max(worst_object_spread, float(distance[flat].quantile(0.99)))
        worst_gap = min(worst_gap, float(distance[~flat].quantile(0.01)))
        threshold = 0.5 * (distance[flat].max() + distance[~flat].min())
        agreements.append(float(((distance < threshold) == flat).float().mean()))
    assert worst_object_spread < worst_gap
    assert min(agreements) > 0.99
    # and the object covers a sensible share of the image
    share = inside.float().mean((1, 2))
    assert float(share.min()) > 0.02 and float(share.max()) < 0.7


def test_shapes_each_shape_has_its_own_area_signature(shapes_data):
    """The masks really draw different shapes: the ring's area fraction of its disc is far below the circle's."""
    y, m = shapes_data.y_train, shapes_data.masks_train
    fill = []
    for label in range(5):
        masks = m[y == label] > 0
        rows = masks.any(2).float().sum(1)
        cols = masks.any(1).float().sum(1)
        fill.append(float((masks.float().sum((1, 2)) / (rows * cols)).mean()))
    circle, square, triangle, cross, ring = fill
    assert ring < circle - 0.15
    assert cross < circle - 0.15
    assert triangle < circle - 0.1
    assert square > triangle


def test_shapes_sizes_and_defaults():
    data = fresh("shapes", size=24, n_train=7, n_val=3)
    assert data.x_train.shape == (7, 3, 24, 24) and data.x_val.shape == (3, 3, 24, 24)
    assert data.masks_train.shape == (7, 24, 24)
    defaults = explorer.registry("datasets")["shapes"].defaults()
    assert defaults["size"] == 32 and defaults["n_train"] == 2000 and defaults["n_val"] == 500


def test_shapes_default_generation_gives_the_default_sizes():
    data = fresh("shapes")  # its generation time is a benchmark's business, not a test's
    assert data.x_train.shape == (2000, 3, 32, 32) and data.masks_val.shape == (500, 32, 32)


# ---- MNIST -------------------------------------------------------------------------------


def test_mnist_loads_exactly_what_was_written(mnist_dir):
    folder, raw = mnist_dir
    data = fresh("mnist", path=folder)
    train_images, val_images = raw["train-images-idx3-ubyte"][:, None], raw["t10k-images-idx3-ubyte"][:, None]
    assert torch.equal(data.y_train, torch.from_numpy(raw["train-labels-idx1-ubyte"].astype(np.int64)))
    assert torch.equal(data.y_val, torch.from_numpy(raw["t10k-labels-idx1-ubyte"].astype(np.int64)))
    assert torch.allclose(data.x_train, standardised(train_images, train_images), atol=1e-4)
    assert torch.allclose(data.x_val, standardised(val_images, train_images), atol=1e-4)


@pytest.mark.parametrize("gz", [(), ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
                                     "t10k-labels-idx1-ubyte")], ids=["plain", "all-gzipped"])
def test_mnist_plain_and_gzipped_files_load_the_same(tmp_path, gz):
    raw = write_mnist(tmp_path / "m", gz=gz)
    data = fresh("mnist", path=str(tmp_path / "m"))
    assert torch.equal(data.y_train, torch.from_numpy(raw["train-labels-idx1-ubyte"].astype(np.int64)))
    train_images = raw["train-images-idx3-ubyte"][:, None]
    assert torch.allclose(data.x_train, standardised(train_images, train_images), atol=1e-4)


def test_mnist_subsets_are_rows_of_the_files(mnist_dir):
    folder, raw = mnist_dir
    data = fresh("mnist", path=folder, n_train=8, n_val=5, seed=3)
    assert data.n_train == 8 and data.n_val == 5
    for x, y, images, labels in ((data.x_train, data.y_train, raw["train-images-idx3-ubyte"], raw["train-labels-idx1-ubyte"]),
                                 (data.x_val, data.y_val, raw["t10k-images-idx3-ubyte"], raw["t10k-labels-idx1-ubyte"])):
        got, table = per_image_normalised(x), per_image_normalised(torch.from_numpy(images)[:, None])
        match = (got @ table.T).argmax(1)
        assert torch.allclose((got * table[match]).sum(1), torch.ones(len(x), dtype=torch.float64), atol=1e-6)
        assert len(set(match.tolist())) == len(x)  # no row twice
        assert torch.equal(y, torch.from_numpy(labels.astype(np.int64))[match])


def test_mnist_subset_larger_than_the_files_is_a_spec_error(mnist_dir):
    folder, _ = mnist_dir
    with pytest.raises(SpecError) as info:
        fresh("mnist", path=folder, n_train=31)
    assert info.value.path == "data.n_train"


def test_mnist_dims_and_defaults():
    entry = explorer.registry("datasets")["mnist"]
    assert entry.defaults()["path"] == "" and entry.defaults()["n_train"] == 0
    assert tuple(entry.info.dims(entry.defaults())) == ((1, 28, 28), 10, "classification")


def _spec_error_at_path(name, **params) -> SpecError:
    with pytest.raises(SpecError) as info:
        fresh(name, **params)
    assert info.value.path == "data.path", info.value
    return info.value


def test_mnist_empty_path_says_to_set_it():
    error = _spec_error_at_path("mnist")
    assert "data.path" in error.message and "train-images-idx3-ubyte" in error.message


def test_mnist_missing_folder(tmp_path):
    error = _spec_error_at_path("mnist", path=str(tmp_path / "nowhere"))
    assert "does not exist" in error.message and "t10k-labels-idx1-ubyte" in error.message


def test_mnist_missing_file_is_named(mnist_dir):
    folder, _ = mnist_dir
    os.remove(os.path.join(folder, "t10k-labels-idx1-ubyte.gz"))
    error = _spec_error_at_path("mnist", path=folder)
    assert "t10k-labels-idx1-ubyte" in error.message
    assert "train-images-idx3-ubyte" not in error.message.split(";")[0]  # only the missing one is listed


def test_mnist_bad_magic(mnist_dir):
    folder, raw = mnist_dir
    with open(os.path.join(folder, "t10k-images-idx3-ubyte"), "wb") as handle:
        handle.write(idx_bytes(raw["t10k-images-idx3-ubyte"], magic=0x0801))
    error = _spec_error_at_path("mnist", path=folder)
    assert "t10k-images-idx3-ubyte" in error.message and "magic" in error.message


@pytest.mark.parametrize("cut", [3, 10, 100])
def test_mnist_truncated_plain_file(mnist_dir, cut):
    folder, raw = mnist_dir
    with open(os.path.join(folder, "t10k-images-idx3-ubyte"), "wb") as handle:
        handle.write(idx_bytes(raw["t10k-images-idx3-ubyte"])[:-cut] if cut != 3 else b"\x00\x00\x08")
    error = _spec_error_at_path("mnist", path=folder)
    assert "t10k-images-idx3-ubyte" in error.message
    assert "truncated" in error.message or "short" in error.message


def test_mnist_truncated_gzip_file(mnist_dir):
    folder, _ = mnist_dir
    name = os.path.join(folder, "train-images-idx3-ubyte.gz")
    with open(name, "rb") as handle:
        data = handle.read()
    with open(name, "wb") as handle:
        handle.write(data[: len(data) // 2])
    error = _spec_error_at_path("mnist", path=folder)
    assert "train-images-idx3-ubyte.gz" in error.message


def test_mnist_extra_bytes_and_mismatched_counts(mnist_dir):
    folder, raw = mnist_dir
    path = os.path.join(folder, "t10k-images-idx3-ubyte")
    with open(path, "wb") as handle:
        handle.write(idx_bytes(raw["t10k-images-idx3-ubyte"]) + b"\x00")
    assert "t10k-images-idx3-ubyte" in _spec_error_at_path("mnist", path=folder).message
    with open(path, "wb") as handle:
        handle.write(idx_bytes(raw["t10k-images-idx3-ubyte"][:-1]))
    assert "t10k-labels-idx1-ubyte" in _spec_error_at_path("mnist", path=folder).message


def test_mnist_wrong_image_size(mnist_dir):
    folder, _ = mnist_dir
    with open(os.path.join(folder, "t10k-images-idx3-ubyte"), "wb") as handle:
        handle.write(idx_bytes(np.zeros((12, 27, 28), dtype=np.uint8)))
    assert "28 x 28" in _spec_error_at_path("mnist", path=folder).message


# ---- CIFAR-10 ----------------------------------------------------------------------------


def test_cifar_loads_exactly_what_was_written(cifar_dir):
    folder, written = cifar_dir
    data = fresh("cifar10", path=folder)
    train = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)]).reshape(-1, 3, 32, 32)
    train_labels = np.concatenate([written[f"data_batch_{i}"][1] for i in range(1, 6)])
    val, val_labels = written["test_batch"][0].reshape(-1, 3, 32, 32), written["test_batch"][1]
    assert data.n_train == 30 and data.n_val == 6
    assert torch.equal(data.y_train, torch.from_numpy(train_labels.astype(np.int64)))
    assert torch.equal(data.y_val, torch.from_numpy(val_labels.astype(np.int64)))
    assert torch.allclose(data.x_train, standardised(train, train), atol=1e-4)
    assert torch.allclose(data.x_val, standardised(val, train), atol=1e-4)


@pytest.mark.parametrize("form", ["bytes", "lists", "str-keys", "protocol-5"])
def test_cifar_accepts_plain_python_batches(tmp_path, form):
    folder = tmp_path / "c"
    written = write_cifar(folder, protocol=5 if form == "protocol-5" else 2)
    if form != "protocol-5":
        for name, (data, labels) in written.items():
            if form == "bytes":
                batch = {b"data": data.tobytes(), b"labels": labels.tolist()}
            elif form == "lists":
                batch = {b"data": data.tolist(), b"labels": labels.tolist()}
            else:
                batch = {"data": data, "labels": labels.tolist()}
            with open(folder / name, "wb") as handle:
                pickle.dump(batch, handle, protocol=2)
    data = fresh("cifar10", path=str(folder))
    val = written["test_batch"][0].reshape(-1, 3, 32, 32)
    assert torch.equal(data.y_val, torch.from_numpy(written["test_batch"][1].astype(np.int64)))
    assert torch.allclose(per_image_normalised(data.x_val), per_image_normalised(torch.from_numpy(val)), atol=1e-5)


def test_cifar_subsets(cifar_dir):
    folder, written = cifar_dir
    data = fresh("cifar10", path=folder, n_train=7, n_val=4, seed=1)
    assert data.n_train == 7 and data.n_val == 4
    raw = np.concatenate([written[f"data_batch_{i}"][0] for i in range(1, 6)]).reshape(-1, 3, 32, 32)
    table = per_image_normalised(torch.from_numpy(raw))
    got = per_image_normalised(data.x_train)
    assert torch.allclose((got @ table.T).max(1).values, torch.ones(7, dtype=torch.float64), atol=1e-6)
    with pytest.raises(SpecError) as info:
        fresh("cifar10", path=folder, n_val=7)
    assert info.value.path == "data.n_val"


def test_cifar_empty_path_and_missing_folder(tmp_path):
    assert "cifar" in _spec_error_at_path("cifar10").message.lower()
    error = _spec_error_at_path("cifar10", path=str(tmp_path / "nowhere"))
    assert "does not exist" in error.message and "cifar-10-python" in error.message


def test_cifar_missing_batch_is_named(cifar_dir):
    folder, _ = cifar_dir
    os.remove(os.path.join(folder, "data_batch_3"))
    error = _spec_error_at_path("cifar10", path=folder)
    lacks = error.message.split(";")[0]  # "<folder> lacks <the missing files>"
    assert "data_batch_3" in lacks and "data_batch_2" not in lacks and "test_batch" not in lacks


def test_cifar_parent_folder_gets_a_hint(cifar_dir):
    folder, _ = cifar_dir
    error = _spec_error_at_path("cifar10", path=os.path.dirname(folder))
    assert "cifar-10-batches-py" in error.message


class Evil:
    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("where", ["top", "inside-dict", "as-data"])
def test_cifar_malicious_pickle_is_refused_and_never_runs(cifar_dir, tmp_path, capfd, where):
    folder, written = cifar_dir
    marker = tmp_path / "pwned"
    evil = Evil(f"echo pwned; touch {marker}")
    payload = {"top": evil, "inside-dict": {b"data": written["data_batch_2"][0], b"labels": [0] * 6, b"x": evil},
               "as-data": {b"data": evil, b"labels": [0] * 6}}[where]
    with open(os.path.join(folder, "data_batch_2"), "wb") as handle:
        pickle.dump(payload, handle, protocol=2)
    error = _spec_error_at_path("cifar10", path=folder)
    assert "data_batch_2" in error.message and "system" in error.message and "refused" in error.message
    assert not marker.exists()
    assert "pwned" not in capfd.readouterr().out


@pytest.mark.parametrize("module, name", [("builtins", "eval"), ("subprocess", "Popen"), ("numpy", "load"),
                                          ("numpy.testing", "_private"), ("_codecs", "decode")])
def test_cifar_refuses_other_globals(cifar_dir, module, name):
    folder, _ = cifar_dir
    # a protocol-2 pickle naming module.name: PROTO 2, GLOBAL, EMPTY_TUPLE, REDUCE, STOP
    with open(os.path.join(folder, "test_batch"), "wb") as handle:
        handle.write(b"\x80\x02c" + f"{module}\n{name}\n".encode() + b")R.")
    error = _spec_error_at_path("cifar10", path=folder)
    assert f"{module}.{name}" in error.message and "test_batch" in error.message


def test_cifar_codecs_encode_is_limited_to_latin1(cifar_dir):
    folder, _ = cifar_dir
    # _codecs.encode("x", "zlib_codec") would reach other codecs: refused
    with open(os.path.join(folder, "test_batch"), "wb") as handle:
        handle.write(b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00xX\n\x00\x00\x00zlib_codec\x86R.")
    assert "test_batch" in _spec_error_at_path("cifar10", path=folder).message


@pytest.mark.parametrize("problem", ["truncated", "garbage", "no-labels", "not-a-dict", "wrong-width",
                                     "label-count", "label-range", "empty"])
def test_cifar_malformed_batches(cifar_dir, problem):
    folder, written = cifar_dir
    data, labels = written["data_batch_4"]
    path = os.path.join(folder, "data_batch_4")
    if problem == "truncated":
        with open(path, "rb") as handle:
            content = handle.read()
        blob = content[: len(content) // 2]
    elif problem == "garbage":
        blob = b"this is not a pickle at all"
    elif problem == "empty":
        blob = b""
    else:
        obj = {
            "no-labels": {b"data": data},
            "not-a-dict": [data, labels],
            "wrong-width": {b"data": data[:, :3000], b"labels": labels.tolist()},
            "label-count": {b"data": data, b"labels": labels.tolist()[:-1]},
            "label-range": {b"data": data, b"labels": [10] * len(labels)},
        }[problem]
        blob = pickle.dumps(obj, protocol=2)
    with open(path, "wb") as handle:
        handle.write(blob)
    error = _spec_error_at_path("cifar10", path=folder)
    assert "data_batch_4" in error.message


# ---- training on images -------------------------------------------------------------------


@pytest.mark.parametrize("data", [{"name": "digits-images", "size": 16},
                                  {"name": "shapes", "size": 16, "n_train": 64, "n_val": 32}])
def test_vector_models_train_on_images(data):
    spec = ExperimentSpec.from_dict({"data": data, "model": {"name": "mlp", "depth": 2, "width": 16},
                                     "train": {"steps": 6, "batch_size": 16, "log_every": 3, "device": "cpu"}})
    run = explorer.train(spec)
    assert run.status == "finished"
    assert run.history and all(np.isfinite(h["loss"]) for h in run.history)
    model, dataset = explorer.build(spec)
    x, _ = dataset.batch(4)
    assert x.shape[1:] == (1 if data["name"] == "digits-images" else 3, 16, 16)
    assert model(x).shape == (4, dataset.output_dim)


def test_spec_with_image_data_round_trips(tmp_path):
    folder = tmp_path / "m"
    write_mnist(folder)
    spec = ExperimentSpec.from_dict({"data": {"name": "mnist", "path": str(folder), "n_train": 10},
                                     "model": {"name": "mlp", "depth": 2, "width": 16}})
    again = ExperimentSpec.from_query(spec.to_query())
    assert again == spec
    assert ExperimentSpec.from_json(spec.to_json()) == spec
