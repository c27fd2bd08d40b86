"""What a ViT's patch tokens show: PCA feature maps (Cutting the Skip, Figure 4) and a dense linear probe.

The paper renders the patch tokens of a block as RGB images: PCA with three components,
fitted across a batch of images, each component scaled to [0, 1]. "Skipless maps are
cleaner" becomes a number here: a linear classifier from each token to the label of its
patch in the `shapes` masks (background or one of the shapes), trained on one half of the
batch and scored by mean intersection-over-union on the other half, block by block.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from explorer import plots
from explorer.nn.transformer import PatchEmbedding, TransformerBlock
from explorer.probes.core import NONFINITE, PROBES, mark_undefined, undefined_note
from explorer.registries import Param, SpecError


def _patch_embedding(model: nn.Module) -> PatchEmbedding:
    embed = getattr(model, "embed", None)
    if not isinstance(embed, PatchEmbedding):
        raise ValueError("PCA feature maps need a ViT (model.name=vit): its patch tokens are what is drawn")
    return embed


@torch.no_grad()
def token_states(model: nn.Module, images: torch.Tensor) -> list[torch.Tensor]:
    """The token stream entering each Transformer block and leaving the last: L + 1 tensors (B, tokens, d).

    State 0 is the embedded input, state b the stream after block b. At module level (skipless)
    a block is an attention and an MLP sub-block, so every second sub-block input is kept.
    """
    stack = model.stack
    captured: list[torch.Tensor] = []
    hooks = [block.register_forward_pre_hook(lambda module, args: captured.append(args[0].detach()))
             for block in stack.blocks]
    try:
        was_training = model.training
        model.eval()
        last = stack(model.embed(images)).detach()
        model.train(was_training)
    finally:
        for hook in hooks:
            hook.remove()
    step = 1 if isinstance(_unwrap(stack.blocks[0]), TransformerBlock) else 2
    return captured[::step] + [last]


def _unwrap(block: nn.Module) -> nn.Module:
    return getattr(block, "block", block)  # Gated (ReZero, SkipInit) wraps the block


def _patch_tokens(model: nn.Module, state: torch.Tensor) -> torch.Tensor:
    """Drop the class token: (B, patches, d)."""
    return state[:, 1:] if _patch_embedding(model).cls is not None else state


def _grid(model: nn.Module, images: torch.Tensor) -> tuple[int, int]:
    p = _patch_embedding(model).patch
    return images.shape[-2] // p, images.shape[-1] // p


def pca_maps(model: nn.Module, images: torch.Tensor, blocks: list[int] | None = None) -> dict[str, np.ndarray]:
    """Patch tokens of the chosen blocks (0 = the embedded input, b = after block b, L = last) on 3 principal components.

    One scikit-learn PCA per block, fitted across all patch tokens of the batch; each component
    is min-max scaled over the batch to [0, 1] and read as R, G, B.
    Returns rgb (blocks, images, grid_h, grid_w, 3), explained_variance_ratio (blocks, 3), blocks. A block whose
    tokens are not finite (a diverged model) has NaN maps and ratios; one whose tokens are all equal has NaN ratios.
    """
    from sklearn.decomposition import PCA

    _patch_embedding(model)
    states = token_states(model, images)
    chosen = list(range(len(states))) if blocks is None else list(blocks)
    for b in chosen:
        if not 0 <= b < len(states):
            raise ValueError(f"block {b} does not exist; choose blocks in 0..{len(states) - 1} (0 = the input)")
    gh, gw = _grid(model, images)
    rgb, ratios = [], []
    for b in chosen:
        tokens = _patch_tokens(model, states[b]).cpu().double().numpy()
        n, t, d = tokens.shape
        if min(n * t, d) < 3:
            raise ValueError(f"PCA with 3 components needs at least 3 patch tokens of at least 3 numbers each; "
                             f"these are {n * t} tokens of {d} (raise model.width or use more images)")
        if not np.isfinite(tokens).all():
            rgb.append(np.full((n, gh, gw, 3), np.nan))
            ratios.append(np.full(3, np.nan))
            continue
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # tokens without variance: 0 / 0 explained variance
            pca = PCA(n_components=3, svd_solver="full").fit(tokens.reshape(n * t, d))
        projected = pca.transform(tokens.reshape(n * t, d))
        low, high = projected.min(0), projected.max(0)
        scaled = (projected - low) / np.where(high > low, high - low, 1.0)
        rgb.append(scaled.reshape(n, gh, gw, 3))
        ratios.append(pca.explained_variance_ratio_ if np.isfinite(pca.explained_variance_ratio_).all()
                      else np.full(3, np.nan))
    return {"rgb": np.stack(rgb), "explained_variance_ratio": np.stack(ratios), "blocks": np.array(chosen)}


def display_images(images: torch.Tensor) -> np.ndarray:
    """(N, C, H, W) images as (N, H, W, 3) RGB in [0, 1]: min-max scaled over the batch, one channel repeated."""
    x = images.detach().cpu().double()
    x = (x - x.min()) / (x.max() - x.min()).clamp_min(1e-12)
    x = x.permute(0, 2, 3, 1)
    return (x.repeat(1, 1, 1, 3) if x.shape[-1] == 1 else x[..., :3]).numpy()


def patch_labels(masks: torch.Tensor, patch: int) -> np.ndarray:
    """The majority label of each p x p patch of (N, H, W) integer masks: (N, H/p * W/p)."""
    n, h, w = masks.shape
    blocks = masks.reshape(n, h // patch, patch, w // patch, patch).permute(0, 1, 3, 2, 4).reshape(n, -1, patch * patch)
    n_labels = int(masks.max()) + 1
    counts = nn.functional.one_hot(blocks.long(), n_labels).sum(2)
    return counts.argmax(-1).cpu().numpy()


def mean_iou(predicted: np.ndarray, truth: np.ndarray) -> float:
    """Mean over the labels present in `truth` or `predicted` of |pred & true| / |pred | true|."""
    labels = np.union1d(np.unique(truth), np.unique(predicted))
    ious = [np.sum((predicted == c) & (truth == c)) / np.sum((predicted == c) | (truth == c)) for c in labels]
    return float(np.mean(ious))


def dense_probe(model: nn.Module, images: torch.Tensor, masks: torch.Tensor, max_iter: int = 300) -> dict[str, np.ndarray]:
    """Linear probe from each block's patch tokens to the patch labels: mIoU of the input (entry 0) and of blocks 1..L.

    The first half of the batch trains a multinomial logistic regression (standardised features),
    the second half is scored. A higher mIoU means the block's tokens separate the objects
    from the background and from each other more linearly, i.e. a cleaner map. A block whose tokens are not
    finite (a diverged model) scores NaN.
    """
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    if len(images) < 4 or len(masks) != len(images):
        raise ValueError(f"the dense probe needs at least 4 images and one mask per image (half fit, half score); "
                         f"got {len(images)} images and {len(masks)} masks")
    labels = patch_labels(masks, _patch_embedding(model).patch)
    half = len(images) // 2
    if len(np.unique(labels[:half])) < 2:
        raise ValueError("the fitting half of the batch has a single patch label; use more images")
    miou = []
    for state in token_states(model, images):
        tokens = _patch_tokens(model, state).cpu().double().numpy()
        if not np.isfinite(tokens).all():  # a diverged model: no classifier to fit
            miou.append(np.nan)
            continue
        d = tokens.shape[-1]
        fit_x, fit_y = tokens[:half].reshape(-1, d), labels[:half].reshape(-1)
        test_x, test_y = tokens[half:].reshape(-1, d), labels[half:].reshape(-1)
        scaler = StandardScaler().fit(fit_x)
        classifier = LogisticRegression(max_iter=max_iter).fit(scaler.transform(fit_x), fit_y)
        miou.append(mean_iou(classifier.predict(scaler.transform(test_x)), test_y))
    return {"miou": np.array(miou), "blocks": np.arange(len(miou))}


@PROBES.register(
    "pca",
    "ViT patch tokens of each block on 3 principal components as RGB maps (Cutting the Skip Fig. 4); with masks, "
    "a dense linear probe's mIoU per block",
    (Param("block", "int", -1, "the block whose map to draw (1 = first, L = last, 0 = the embedded input); -1: the "
                               "input and every block", low=-1,
           high=100_000),
     Param("max_inputs", "int", 64, "use at most this many images", low=4, high=100_000)),
    tensors={"masks": "per-pixel labels (N, H, W) of the images (the shapes dataset's masks) for the dense probe"},
    # every block's tokens, then the PCA and the dense probe on them
    cost=lambda c: c.forward(c.n) + 4 * (c.depth + 1) * c.n * c.stream + 7 * 8 * c.n * c.stream,
)
def pca(model, inputs, block, max_inputs, masks):
    """rgb (blocks, images, grid_h, grid_w, 3), explained_variance_ratio (blocks, 3), blocks (0 = the input, b =
    after block b); miou (L + 1,: the input, then blocks 1..L) with masks; images: the first 4 input images as
    RGB in [0, 1] (N, H, W, 3), min-max scaled over them, so a figure can draw them above their maps."""
    images = inputs[:max_inputs]
    try:
        result = pca_maps(model, images, None if block < 0 else [block])
    except ValueError as error:
        raise SpecError("probe.block" if "does not exist" in str(error) else "probe", str(error)) from None
    result["images"] = display_images(images[:4])
    shown = [int(b) for b in result["blocks"]]
    undefined = {}
    diverged = [i for i, maps in enumerate(result["rgb"]) if not np.isfinite(maps).all()]
    flat = [i for i, ratio in enumerate(result["explained_variance_ratio"]) if np.isnan(ratio).any() and i not in diverged]
    if diverged:
        undefined["rgb"] = f"{_states(diverged, shown)}: the patch tokens hold {NONFINITE}"
    ratio_why = ([undefined["rgb"]] if diverged else []) + \
        ([f"{_states(flat, shown)}: every patch token is the same, so no direction explains any variance"] if flat else [])
    if ratio_why:
        undefined["explained_variance_ratio"] = "; ".join(ratio_why)
    if masks is not None:
        masks = masks[:max_inputs]
        try:
            miou = dense_probe(model, images, masks)["miou"]
            bad = np.flatnonzero(np.isnan(miou)).tolist()
            if bad:
                undefined["miou"] = f"{_states(bad, list(range(len(miou))))}: the patch tokens hold {NONFINITE}"
        except ValueError as error:
            miou = np.full(len(token_states(model, images[:1])), np.nan)
            undefined["miou"] = str(error)
        result["miou"] = miou
    return {**result, **mark_undefined(undefined)}


def _states(indices: list[int], blocks: list[int]) -> str:
    """The stream states at `indices` of `blocks` by name: "input, block 2"."""
    return ", ".join(plots.state_labels([blocks[i] for i in indices]))


@plots.figure_for("pca")
def pca_figures(r, head):
    """The first four input images above their PCA feature maps per block, and the dense probe's mIoU per block
    (when it was scored)."""
    rgb = np.nan_to_num(r["rgb"][:, :4], nan=0.5)  # undefined maps (a diverged model) are drawn grey
    inputs = r["images"][:rgb.shape[1]] if "images" in r else None  # results recorded before it had images
    figs = [plots.pca_grid(rgb, plots.state_labels(r["blocks"]), [f"image {i + 1}" for i in range(rgb.shape[1])],
                           f"{head}PCA feature maps (first 3 components as RGB)" + undefined_note(r), inputs=inputs)]
    if "miou" in r and np.isfinite(r["miou"]).any():
        figs.append(plots.norms_by_layer({"dense-probe mIoU": r["miou"]}, f"{head}dense linear probe mIoU by block",
                                         ylabel="mIoU", labels=plots.state_labels(range(len(r["miou"])))))
    return figs
