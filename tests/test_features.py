"""PCA feature maps and the dense linear probe of ViT patch tokens (Cutting the Skip, Figure 4)."""

import numpy as np
import pytest
import torch
from sklearn.decomposition import PCA

import explorer
from explorer.probes import probe
from explorer.probes.features import mean_iou, patch_labels, token_states


def vit(topology="cascaded", level="block"):
    spec = explorer.ExperimentSpec.from_dict({
        "data": {"name": "shapes", "size": 16, "n_train": 16, "n_val": 24},
        "model": {"name": "vit", "depth": 2, "width": 16, "heads": 2, "patch": 4, "level": level},
        "topology": {"name": topology}, "train": {"steps": 2, "log_every": 1}})
    return explorer.build(spec)


def test_pca_map_matches_scikit_learn_up_to_the_sign_of_each_component():
    model, data = vit()
    images = data.x_val[:12]
    result = probe(model, images, "pca", block=1)
    tokens = token_states(model, images)[1][:, 1:].double().numpy()  # drop the class token
    flat = tokens.reshape(-1, tokens.shape[-1])
    reference = PCA(n_components=3).fit_transform(flat)
    got = result["rgb"][0].reshape(-1, 3)
    for c in range(3):
        ref = (reference[:, c] - reference[:, c].min()) / np.ptp(reference[:, c])
        flipped = 1.0 - ref
        assert min(np.abs(got[:, c] - ref).max(), np.abs(got[:, c] - flipped).max()) < 1e-6, c
    assert result["rgb"].shape == (1, 12, 4, 4, 3) and (0 <= result["rgb"]).all() and (result["rgb"] <= 1).all()


def test_token_states_are_the_stream_between_blocks_at_both_levels():
    for topology, level in (("cascaded", "block"), ("skipless", "block"), ("cascaded", "module")):
        model, data = vit(topology, level)
        x = data.x_val[:3]
        states = token_states(model, x)
        assert len(states) == 3  # embedding + 2 blocks
        with torch.no_grad():
            assert torch.allclose(states[0], model.embed(x))
            assert torch.allclose(states[-1], model.stack(model.embed(x)))


def test_patch_labels_take_the_majority_and_mean_iou_is_the_textbook_one():
    masks = torch.zeros(1, 4, 4, dtype=torch.long)
    masks[0, :2, :2] = 3  # top-left patch all 3
    masks[0, 2:, 2:] = torch.tensor([[2, 2], [2, 0]])  # bottom-right: majority 2
    assert patch_labels(masks, 2).tolist() == [[3, 0, 0, 2]]
    pred, truth = np.array([0, 0, 1, 1]), np.array([0, 1, 1, 1])
    assert mean_iou(pred, truth) == pytest.approx((1 / 2 + 2 / 3) / 2)


def test_dense_probe_scores_each_block_and_is_perfect_on_linearly_separable_tokens():
    model, data = vit()
    result = probe(model, data.x_val, "pca", masks=data.masks_val)
    assert result["miou"].shape == (3,) and ((0 <= result["miou"]) & (result["miou"] <= 1)).all()
    # Each 4x4 patch painted one of three colours, its mask the colour's label: the embedding (linear in
    # the pixels, plus positions) separates them linearly, so block 0 must score an mIoU of 1.
    gen = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (24, 4, 4), generator=gen)
    colours = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    images = colours[labels].permute(0, 3, 1, 2).repeat_interleave(4, 2).repeat_interleave(4, 3)
    masks = labels.repeat_interleave(4, 1).repeat_interleave(4, 2)
    painted = probe(model, images, "pca", masks=masks)
    assert painted["miou"][0] == pytest.approx(1.0), painted["miou"]


def test_pca_refuses_models_without_patch_tokens():
    spec = explorer.ExperimentSpec.from_dict({"data": {"name": "spirals"}, "model": {"name": "mlp"},
                                              "train": {"steps": 2, "log_every": 1}})
    model, data = explorer.build(spec)
    with pytest.raises(explorer.SpecError) as err:
        probe(model, data.x_val[:8], "pca")
    assert err.value.path == "probe" and "vit" in str(err.value)
