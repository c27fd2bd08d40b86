"""Image datasets as (N, C, H, W) tensors: sklearn digits, generated shapes, local MNIST and CIFAR-10.

Every image dataset is standardised per channel with its training statistics, has int64
labels, and is deterministic from the section's `seed`. Nothing is ever downloaded:
`mnist` and `cifar10` read files already placed in the folder `data.path`, and say what
to place there when they are missing. CIFAR-10's batches are pickles, so they are read
with a restricted unpickler that can rebuild numpy arrays and nothing else.
"""

from __future__ import annotations

import gzip
import math
import os
import pickle
import zlib

import numpy as np
import torch
import torch.nn.functional as F

from explorer.data.base import DATASETS, SEED
from explorer.data.files import local_path
from explorer.data.tabular import VAL_FRACTION, _split_standardize, digits_arrays
from explorer.registries import Param, SpecError


def _standardize_channels(x_train: torch.Tensor, x_val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Standardise (N, C, H, W) float images per channel with the training set's mean and std (in place)."""
    var, mean = torch.var_mean(x_train, dim=(0, 2, 3), correction=0, keepdim=True)
    std = var.sqrt()
    std[std < 1e-6] = 1.0
    return x_train.sub_(mean).div_(std), x_val.sub_(mean).div_(std)


# ---- digits as images ------------------------------------------------------------------

DIGIT_SIZES = (8, 16, 32)


def _check_digits_images(p):
    if p["size"] not in DIGIT_SIZES:
        raise SpecError("data.size", f"the 8x8 digits can be upsampled to {', '.join(map(str, DIGIT_SIZES))} pixels, "
                                     f"got {p['size']}; set data.size to one of those")


@DATASETS.register(
    "digits-images",
    "sklearn's 8x8 handwritten digits as 1-channel images, optionally upsampled, 10 classes (1797 images)",
    (
        Param("size", "int", 8, "image side in pixels: 8 (original), 16 or 32 (bilinear upsampling)", low=8, high=32),
        VAL_FRACTION,
        SEED,
    ),
    dims=lambda p: ((1, p["size"], p["size"]), 10, "classification"),
    check=_check_digits_images,
)
def digits_images(size: int, val_fraction: float, seed: int):
    """scikit-learn's bundled digits (no download); the same split as `digits` for the same seed."""
    images, target = digits_arrays()
    # tabular's shuffle-and-split, applied to example indices (the dummy feature is discarded)
    _, train_index, _, val_index = _split_standardize(np.zeros((len(images), 1)), np.arange(len(images)),
                                                      val_fraction, seed)
    x = torch.tensor(images)[:, None]
    if size != 8:
        x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    labels = torch.tensor(target)
    x_train, x_val = x[train_index].contiguous(), x[val_index].contiguous()
    x_train, x_val = _standardize_channels(x_train, x_val)
    return x_train, labels[train_index], x_val, labels[val_index]


# ---- generated shapes ------------------------------------------------------------------

SHAPES = ("circle", "square", "triangle", "cross", "ring")
TEXTURES = ("noise", "stripes", "checker")


def _inside(kind: int, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Which pixels lie inside shape SHAPES[kind]; a, b: (N, H, W) coordinates in the shape's own frame.

    The frame is rotated with the shape and scaled by its radius, so every shape fits in the unit disc.
    """
    name = SHAPES[kind]
    if name in ("circle", "ring"):
        squared = a * a + b * b
        return (squared <= 1.0) & (squared >= 0.55 ** 2) if name == "ring" else squared <= 1.0
    if name == "square":
        return torch.maximum(a.abs(), b.abs()) <= 0.75
    if name == "triangle":  # equilateral, circumradius 1: inside all three half-planes n_k . (a, b) <= 1/2
        inside = b <= 0.5  # n_0 = (0, 1), n_1,2 = (+-sqrt(3)/2, -1/2)
        inside &= (math.sqrt(3) / 2) * a.abs() - 0.5 * b <= 0.5
        return inside
    if name == "cross":
        a, b = a.abs(), b.abs()
        return (torch.minimum(a, b) <= 0.3) & (torch.maximum(a, b) <= 1.0)
    raise AssertionError(name)


def _texture(which: int, n: int, size: int, grid, gen: torch.Generator) -> torch.Tensor:
    """(n, H, W) background patterns in [0, 1]: smooth noise, stripes or a checkerboard."""
    u, v = grid  # (H, W) pixel centres in [0, 1]
    name = TEXTURES[which]
    if name == "noise":
        coarse = torch.rand(n, 1, 4, 4, generator=gen)
        return F.interpolate(coarse, size=(size, size), mode="bicubic", align_corners=False)[:, 0].clamp_(0, 1)
    if name == "stripes":
        phi = torch.rand(n, 1, 1, generator=gen) * math.pi
        freq = 2 + 4 * torch.rand(n, 1, 1, generator=gen)  # cycles per image
        phase = torch.rand(n, 1, 1, generator=gen) * 2 * math.pi
        angle = (2 * math.pi * freq * torch.cos(phi)) * u + (2 * math.pi * freq * torch.sin(phi)) * v + phase
        return angle.sin_().mul_(0.5).add_(0.5)
    if name == "checker":
        cells = torch.randint(2, 7, (n, 1, 1), generator=gen).float()
        offset = torch.rand(n, 2, 1, 1, generator=gen)
        return ((torch.floor(u * cells + offset[:, 0]) + torch.floor(v * cells + offset[:, 1])) % 2)
    raise AssertionError(name)


def _colours_apart(n: int, gen: torch.Generator, min_distance: float = 0.45, tries: int = 16):
    """Object colours (n, 3) and two background colours each (n, 2, 3).

    Every colour on the segment between the two background colours (every background pixel
    before noise) lies at least min_distance (RGB in [0, 1]) from the object's colour.
    """
    obj = torch.rand(n, 3, generator=gen)
    candidates = torch.rand(n, tries, 2, 3, generator=gen)
    c1, c2, o = candidates[:, :, 0], candidates[:, :, 1], obj[:, None, :]
    direction = c2 - c1
    along = ((o - c1) * direction).sum(-1, keepdim=True) / direction.square().sum(-1, keepdim=True).clamp_min(1e-12)
    nearest = c1 + along.clamp(0, 1) * direction
    ok = (nearest - o).norm(dim=-1) >= min_distance  # (n, tries)
    first = ok.float().argmax(1)  # the first acceptable pair (0 when none is)
    background = candidates[torch.arange(n), first]
    # when no candidate was far enough: the opposite colour, 0.5 away on every channel (distance 0.87)
    opposite = ((obj + 0.5) % 1.0)[:, None, :].expand(n, 2, 3)
    background = torch.where(ok.any(1)[:, None, None], background, opposite)
    return obj, background


def _shapes_split(n: int, size: int, gen: torch.Generator):
    """n images (n, 3, H, W) in [0, 1] plus noise, their labels (n,) and masks (n, H, W)."""
    labels = (torch.arange(n) % len(SHAPES))[torch.randperm(n, generator=gen)]  # balanced to within one
    centres = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    v, u = torch.meshgrid(centres, centres, indexing="ij")  # v: rows (y), u: columns (x)
    radius = 0.2 + 0.17 * torch.rand(n, generator=gen)  # fraction of the image side
    margin = 1.05 * radius
    cx = margin + (1 - 2 * margin) * torch.rand(n, generator=gen)
    cy = margin + (1 - 2 * margin) * torch.rand(n, generator=gen)
    theta = 2 * math.pi * torch.rand(n, generator=gen)
    # shape frame: a = (cos dx + sin dy) / r, b = (cos dy - sin dx) / r, as affine maps of the pixel grid
    cos, sin, r = torch.cos(theta), torch.sin(theta), radius
    a_u, a_v, a_0 = cos / r, sin / r, -(cos * cx + sin * cy) / r
    b_u, b_v, b_0 = -sin / r, cos / r, (sin * cx - cos * cy) / r
    col = lambda t: t.view(-1, 1, 1)  # noqa: E731
    inside = torch.empty(n, size, size, dtype=torch.bool)
    for kind in range(len(SHAPES)):
        index = (labels == kind).nonzero()[:, 0]
        if len(index):
            a = col(a_u[index]) * u + col(a_v[index]) * v + col(a_0[index])
            b = col(b_u[index]) * u + col(b_v[index]) * v + col(b_0[index])
            inside[index] = _inside(kind, a, b)

    obj, background = _colours_apart(n, gen)
    which = torch.randint(0, len(TEXTURES), (n,), generator=gen)
    t = torch.empty(n, size, size)
    for kind in range(len(TEXTURES)):
        index = (which == kind).nonzero()[:, 0]
        if len(index):
            t[index] = _texture(kind, len(index), size, (u, v), gen)
    c1, c2 = background[:, 0, :, None, None], background[:, 1, :, None, None]
    images = torch.addcmul(c1, c2 - c1, t[:, None])  # (n, 3, H, W)
    images = torch.where(inside[:, None], obj[:, :, None, None], images)
    images += 0.02 * torch.randn(images.shape, generator=gen)
    masks = inside.long() * (labels.view(-1, 1, 1) + 1)
    return images, labels, masks


@DATASETS.register(
    "shapes",
    "generated coloured shapes (circle, square, triangle, cross, ring) on textured backgrounds, with pixel masks",
    (
        Param("size", "int", 32, "image side in pixels", low=16, high=128),
        Param("n_train", "int", 2000, "training images", low=1, high=200_000),
        Param("n_val", "int", 500, "validation images", low=1, high=200_000),
        SEED,
    ),
    dims=lambda p: ((3, p["size"], p["size"]), len(SHAPES), "classification"),
)
def shapes(size: int, n_train: int, n_val: int, seed: int):
    """One shape per image: label = shape; masks (N, H, W) hold 0 for background and 1 + label on the shape.

    Position, scale, rotation and colour are random; the background is smooth noise, stripes
    or a checkerboard blending two random colours, every blend at least 0.45 (RGB distance)
    from the object's colour; then a little pixel noise (std 0.02) on every pixel.
    """
    gen = torch.Generator().manual_seed(seed)
    x_train, y_train, m_train = _shapes_split(n_train, size, gen)
    x_val, y_val, m_val = _shapes_split(n_val, size, gen)
    x_train, x_val = _standardize_channels(x_train, x_val)
    return x_train, y_train, x_val, y_val, m_train, m_val


# ---- local files: shared helpers -------------------------------------------------------

PATH_HELP = "folder holding the dataset's files (nothing is downloaded)"


def _check_files(path: str, needed: dict[str, tuple[str, ...]], what: str, where: str, hints: tuple[str, ...]) -> None:
    """SpecError at data.path unless `path` is a folder with one of the accepted names for every needed file."""
    if not path:
        raise SpecError("data.path", f"set data.path to a local folder holding {what}; {where}")
    folder = local_path(path)
    if not os.path.exists(folder):
        raise SpecError("data.path", f"folder {folder} does not exist; it must hold {what}; {where}")
    if not os.path.isdir(folder):
        raise SpecError("data.path", f"{folder} is a file, not a folder; point data.path at the folder holding {what}")
    missing = [name for name, accepted in needed.items()
               if not any(os.path.isfile(os.path.join(folder, a)) for a in accepted)]
    if missing:
        found = [h for h in hints if os.path.isdir(os.path.join(folder, h))]
        hint = f" (it has a subfolder {found[0]!r}: did you mean data.path={os.path.join(folder, found[0])}?)" if found else ""
        raise SpecError("data.path", f"{folder} lacks {', '.join(missing)}{hint}; {where}")


def _bad(filename: str, problem: str) -> SpecError:
    return SpecError("data.path", f"{filename}: {problem}")


def _subsample(n_available: int, n: int, rng: np.random.Generator, param: str, split: str) -> np.ndarray:
    """Indices (in file order) of n examples drawn at random without replacement; all when n is 0."""
    if n == 0:
        return np.arange(n_available)
    if n > n_available:
        raise SpecError(f"data.{param}", f"the {split} files hold {n_available} examples, fewer than {n}; "
                                         f"set data.{param}={n_available} or less (0 = all)")
    return np.sort(rng.permutation(n_available)[:n])


def _subsampled_tensors(train, val, n_train: int, n_val: int, seed: int, what: str):
    """(x, y) arrays of the official train and test splits -> subsampled, standardised tensors."""
    rng = np.random.default_rng(seed)
    keep_train = _subsample(len(train[0]), n_train, rng, "n_train", f"{what} training")
    keep_val = _subsample(len(val[0]), n_val, rng, "n_val", f"{what} test")
    return _to_tensors(train[0][keep_train], train[1][keep_train], val[0][keep_val], val[1][keep_val])


def _to_tensors(x_train: np.ndarray, y_train, x_val: np.ndarray, y_val):
    """uint8 (N, C, H, W) arrays to standardised float32 tensors, labels to int64."""
    xt = torch.from_numpy(np.ascontiguousarray(x_train)).float()
    xv = torch.from_numpy(np.ascontiguousarray(x_val)).float()
    xt, xv = _standardize_channels(xt, xv)
    as_labels = lambda y: torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))  # noqa: E731
    return xt, as_labels(y_train), xv, as_labels(y_val)


# ---- MNIST -----------------------------------------------------------------------------

MNIST_FILES = {
    "train-images-idx3-ubyte": ("images", "train"),
    "train-labels-idx1-ubyte": ("labels", "train"),
    "t10k-images-idx3-ubyte": ("images", "val"),
    "t10k-labels-idx1-ubyte": ("labels", "val"),
}
MNIST_WHERE = ("place the four MNIST files train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte "
               "and t10k-labels-idx1-ubyte there, gzipped (.gz, as distributed) or not; get them yourself from an "
               "MNIST mirror (e.g. the files torchvision keeps under MNIST/raw), nothing is downloaded automatically")
IDX_MAGIC = {"images": 0x00000803, "labels": 0x00000801}  # unsigned bytes, 3 or 1 dimensions


def _mnist_names(base: str) -> tuple[str, str]:
    return base, base + ".gz"


def _check_mnist(p):
    _check_files(p["path"], {base: _mnist_names(base) for base in MNIST_FILES}, "the MNIST IDX files", MNIST_WHERE,
                 ("raw", "MNIST", os.path.join("MNIST", "raw")))


def _read_maybe_gzipped(folder: str, base: str) -> tuple[str, bytes]:
    """(file name, contents): the plain file if present, else the .gz; gzip detected from the content."""
    for name in _mnist_names(base):
        full = os.path.join(folder, name)
        if os.path.isfile(full):
            break
    else:
        raise _bad(base, f"missing from {folder}; {MNIST_WHERE}")
    with open(full, "rb") as handle:
        raw = handle.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise _bad(name, f"is not a readable gzip file ({err}); it may be truncated, download it again") from None
    return name, raw


def _parse_idx(name: str, raw: bytes, kind: str) -> np.ndarray:
    """An IDX array of unsigned bytes: magic (0, 0, 0x08, ndim), ndim big-endian uint32 sizes, then the data."""
    if len(raw) < 4:
        raise _bad(name, f"is too short to be an IDX file ({len(raw)} bytes)")
    magic = int.from_bytes(raw[:4], "big")
    if magic != IDX_MAGIC[kind]:
        layout = "unsigned bytes in 3 dimensions" if kind == "images" else "unsigned bytes in 1 dimension"
        raise _bad(name, f"bad magic number 0x{magic:08x}, expected 0x{IDX_MAGIC[kind]:08x} (MNIST {kind}: IDX of "
                         f"{layout}); this is not an MNIST {kind} file")
    ndim = raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise _bad(name, f"is truncated: its header needs {header} bytes, the file has {len(raw)}")
    shape = tuple(int(s) for s in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    expected = header + math.prod(shape)
    if len(raw) != expected:
        state = "truncated" if len(raw) < expected else "longer than its header says"
        raise _bad(name, f"is {state}: dimensions {' x '.join(map(str, shape))} need {expected} bytes, "
                         f"the file has {len(raw)}")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(shape)


def _load_mnist_split(folder: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    prefix = "train" if split == "train" else "t10k"
    image_name, raw = _read_maybe_gzipped(folder, f"{prefix}-images-idx3-ubyte")
    images = _parse_idx(image_name, raw, "images")
    if images.shape[1:] != (28, 28):
        raise _bad(image_name, f"holds {images.shape[1]} x {images.shape[2]} images; MNIST images are 28 x 28")
    label_name, raw = _read_maybe_gzipped(folder, f"{prefix}-labels-idx1-ubyte")
    labels = _parse_idx(label_name, raw, "labels")
    if len(labels) != len(images):
        raise _bad(label_name, f"holds {len(labels)} labels but {image_name} holds {len(images)} images")
    if len(labels) and labels.max() > 9:
        raise _bad(label_name, f"holds label {int(labels.max())}; MNIST labels are 0..9")
    return images, labels


@DATASETS.register(
    "mnist",
    "MNIST handwritten digits (28x28, 10 classes) read from local IDX files; the official test set validates",
    (
        Param("path", "str", "", PATH_HELP + ": the four MNIST IDX files, gzipped or not"),
        Param("n_train", "int", 0, "training images drawn at random from the 60000 (0 = all)", low=0, high=60_000),
        Param("n_val", "int", 0, "validation images drawn at random from the 10000 test images (0 = all)",
              low=0, high=10_000),
        SEED,
    ),
    dims=lambda p: ((1, 28, 28), 10, "classification"),
    check=_check_mnist,
)
def mnist(path: str, n_train: int, n_val: int, seed: int):
    """The original IDX files (also fits Fashion-MNIST, which uses the same names and format)."""
    _check_mnist({"path": path})
    folder = local_path(path)
    (x_train, y_train), (x_val, y_val) = (_load_mnist_split(folder, split) for split in ("train", "val"))
    return _subsampled_tensors((x_train[:, None], y_train), (x_val[:, None], y_val), n_train, n_val, seed, "MNIST")


# ---- CIFAR-10 --------------------------------------------------------------------------

CIFAR_TRAIN = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_FILES = (*CIFAR_TRAIN, "test_batch")
CIFAR_WHERE = ("download cifar-10-python.tar.gz (the python version) from https://www.cs.toronto.edu/~kriz/cifar.html "
               "yourself, extract it, and point data.path at its cifar-10-batches-py folder, which holds "
               f"{', '.join(CIFAR_FILES)}; nothing is downloaded automatically")


def _check_cifar(p):
    _check_files(p["path"], {name: (name,) for name in CIFAR_FILES}, "the CIFAR-10 python batches", CIFAR_WHERE,
                 ("cifar-10-batches-py",))


def _latin1_encode(text, encoding="latin1", errors="strict"):
    """`_codecs.encode` as protocol-2 pickles use it to store bytes, limited to latin-1."""
    if not isinstance(text, str) or encoding.lower().replace("_", "-") not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(f"refused _codecs.encode({type(text).__name__}, {encoding!r}): only latin-1 "
                                     "text-to-bytes is allowed")
    return text.encode("latin-1", errors)


def _numpy_globals() -> dict[tuple[str, str], object]:
    """The only globals a CIFAR batch may name: what it takes to rebuild numpy arrays (and bytes)."""
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy < 2
        from numpy.core import multiarray, numeric
    allowed = {("_codecs", "encode"): _latin1_encode}
    for module in ("numpy.core", "numpy._core"):
        allowed[(f"{module}.multiarray", "_reconstruct")] = multiarray._reconstruct
        if hasattr(numeric, "_frombuffer"):  # protocol 5 pickles of arrays
            allowed[(f"{module}.numeric", "_frombuffer")] = numeric._frombuffer
    allowed[("numpy", "ndarray")] = np.ndarray
    allowed[("numpy", "dtype")] = np.dtype
    return allowed


class RefusedGlobal(pickle.UnpicklingError):
    """A pickle named a global the restricted unpickler does not allow."""


class _ArrayUnpickler(pickle.Unpickler):
    """Rebuilds dicts, lists, bytes and numpy arrays; refuses every other global (so no code runs)."""

    _allowed = None

    def find_class(self, module: str, name: str):
        if _ArrayUnpickler._allowed is None:
            _ArrayUnpickler._allowed = _numpy_globals()
        found = _ArrayUnpickler._allowed.get((module, name))
        if found is None:
            raise RefusedGlobal(f"refused to load the global {module}.{name}: a CIFAR-10 batch may only hold "
                                "numpy arrays, lists and bytes, so this file is not one (or has been tampered with)")
        return found


def _load_cifar_batch(folder: str, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(images (N, 3, 32, 32) uint8, labels (N,) int64) from one pickled batch."""
    with open(os.path.join(folder, name), "rb") as handle:
        try:
            batch = _ArrayUnpickler(handle, encoding="bytes").load()
        except RefusedGlobal as err:
            raise _bad(name, str(err)) from None
        except EOFError:
            raise _bad(name, "ends early (truncated?); extract the batch again from cifar-10-python.tar.gz") from None
        except Exception as err:  # noqa: BLE001 - any failure to unpickle means a malformed file
            raise _bad(name, f"is not a readable CIFAR-10 python batch ({type(err).__name__}: {err})") from None
    if not isinstance(batch, dict):
        raise _bad(name, f"holds a {type(batch).__name__}, not the dict of a CIFAR-10 batch")
    keys = {(k.decode("latin-1") if isinstance(k, bytes) else k): v for k, v in batch.items()}
    missing = [k for k in ("data", "labels") if k not in keys]
    if missing:
        shown = ", ".join(sorted(repr(k) for k in batch)) or "none"
        raise _bad(name, f"lacks the key(s) {', '.join(missing)} of a CIFAR-10 batch (its keys: {shown})")
    data, labels = keys["data"], keys["labels"]
    try:
        if isinstance(data, (bytes, bytearray)):
            data = np.frombuffer(data, dtype=np.uint8)
            if data.size % 3072:
                raise ValueError(f"{data.size} bytes is not a whole number of 3072-byte images")
            data = data.reshape(-1, 3072)
        data = np.asarray(data)
        labels = np.asarray(labels)
    except (ValueError, TypeError) as err:
        raise _bad(name, f"has unreadable data or labels ({err})") from None
    if data.dtype == object or labels.dtype == object:
        raise _bad(name, "holds Python objects where numbers belong")
    if data.ndim != 2 or data.shape[1] != 3072:
        raise _bad(name, f"data has shape {data.shape}; CIFAR-10 data are N x 3072 (3 x 32 x 32 bytes per image)")
    if data.size and (not np.issubdtype(data.dtype, np.integer) or data.min() < 0 or data.max() > 255):
        raise _bad(name, f"data are not pixel values 0..255 (dtype {data.dtype})")
    if labels.ndim != 1 or len(labels) != len(data):
        raise _bad(name, f"has {labels.size} labels for {len(data)} images")
    if labels.size and (not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0 or labels.max() > 9):
        raise _bad(name, "labels are not class numbers 0..9")
    return data.astype(np.uint8, copy=False).reshape(-1, 3, 32, 32), labels.astype(np.int64)


@DATASETS.register(
    "cifar10",
    "CIFAR-10 colour images (3x32x32, 10 classes) read from the local python batches; test_batch validates",
    (
        Param("path", "str", "", PATH_HELP + ": the cifar-10-batches-py folder"),
        Param("n_train", "int", 0, "training images drawn at random from the 50000 (0 = all)", low=0, high=50_000),
        Param("n_val", "int", 0, "validation images drawn at random from the 10000 of test_batch (0 = all)",
              low=0, high=10_000),
        SEED,
    ),
    dims=lambda p: ((3, 32, 32), 10, "classification"),
    check=_check_cifar,
)
def cifar10(path: str, n_train: int, n_val: int, seed: int):
    """data_batch_1..5 for training, test_batch for validation, read without running any pickled code."""
    _check_cifar({"path": path})
    folder = local_path(path)
    parts = [_load_cifar_batch(folder, name) for name in CIFAR_TRAIN]
    train = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
    return _subsampled_tensors(train, _load_cifar_batch(folder, "test_batch"), n_train, n_val, seed, "CIFAR-10")
