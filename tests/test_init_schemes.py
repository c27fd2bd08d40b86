"""IDInit / ZerO / Fixup tensor schemes (explorer.init_schemes)."""

import math

import pytest
import torch
import torch.nn.functional as F

from explorer.init_schemes import (
    fixup,
    fixup_scale,
    hadamard,
    idi_,
    idic_,
    idinit,
    idiz_,
    idizc_,
    zero,
    zero_hadamard_,
)

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def expected_idi(d_out, d_in, tau, wide="truncate"):
    """Eq. 3 written out entry by entry (and the documented 'pad' variant for wide)."""
    w = torch.zeros(d_out, d_in, dtype=F64)
    for m in range(d_out):
        for j in range(d_in):
            if wide == "pad" and d_out < d_in:
                hit = j % d_out == m
            else:
                hit = m % d_in == j
            if hit:
                w[m, j] = tau
    return w


def expected_idiz(d_out, d_in, eps):
    """The documented IDIZ rule, written out with loops (0-indexed)."""
    w = torch.zeros(d_out, d_in, dtype=F64)
    if d_out < d_in:
        for m in range(d_out):
            w[m, m] = eps
            w[m, d_out + m % (d_in - d_out)] = -eps
    else:
        for m in range(d_out):
            w[m, m % d_in] = eps
            if d_in > 1:
                w[m, (m + 1) % d_in] = -eps
    return w


# ----------------------------------------------------------------------------- IDI


@pytest.mark.parametrize("tau", [1.0, math.sqrt(2.0), 0.3])
def test_idi_square_is_tau_identity(tau):
    w = idi_(torch.empty(6, 6, dtype=F64), tau)
    assert torch.equal(w, tau * torch.eye(6, dtype=F64))


@pytest.mark.parametrize("shape", [(7, 3), (9, 3), (8, 5), (3, 7), (2, 9), (5, 6)])
def test_idi_matches_eq3_entry_by_entry(shape):
    w = idi_(torch.full(shape, 9.0, dtype=F64), 1.5)
    assert torch.equal(w, expected_idi(*shape, 1.5))


def test_idi_tall_stacks_identities_and_wide_truncates():
    tall = idi_(torch.empty(7, 3, dtype=F64))
    assert torch.equal(tall[:3], torch.eye(3, dtype=F64)) and torch.equal(tall[3:6], torch.eye(3, dtype=F64))
    assert torch.equal(tall[6], torch.tensor([1.0, 0.0, 0.0], dtype=F64))
    wide = idi_(torch.empty(3, 7, dtype=F64))
    assert torch.equal(wide[:, :3], torch.eye(3, dtype=F64)) and not wide[:, 3:].any()


@pytest.mark.parametrize("shape", [(3, 7), (2, 9), (4, 4), (7, 3)])
def test_idi_wide_pad_repeats_identity_along_inputs(shape):
    w = idi_(torch.empty(shape, dtype=F64), 2.0, wide="pad")
    assert torch.equal(w, expected_idi(*shape, 2.0, wide="pad"))
    if shape[0] < shape[1]:
        assert (w != 0).any(0).all(), "pad: every input column must feed an output"


def test_idi_loose_condition_statistics():
    tau, std = 1.0, 0.05
    w = idi_(torch.empty(1200, 400, dtype=F64), tau, loose_std=std, gen=gen(3))
    mask = expected_idi(1200, 400, 1.0) != 0
    nz = w[mask]
    assert nz.numel() == 1200
    assert abs(nz.mean().item() - tau) < 4 * std / math.sqrt(nz.numel()), nz.mean().item()
    assert abs(nz.std().item() / std - 1) < 0.1, nz.std().item()
    assert not w[~mask].any(), "zeros of Eq. 3 must stay exactly zero"


def test_idi_loose_tiny_std_still_breaks_replicas_in_float32():
    w = idi_(torch.empty(32, 8), 1.0, loose_std=1e-6, gen=gen())
    nz = w[expected_idi(32, 8, 1.0) != 0]
    assert nz.unique().numel() > 1 and (nz - 1).abs().max() < 1e-5


def test_idi_loose_needs_a_generator():
    with pytest.raises(ValueError, match="Generator"):
        idi_(torch.empty(4, 4), loose_std=0.1)


# ----------------------------------------------------------------------------- IDIZ


@pytest.mark.parametrize("shape", [(6, 4), (4, 4), (9, 2), (3, 8), (5, 7), (2, 3), (4, 1)])
def test_idiz_pattern(shape):
    w = idiz_(torch.full(shape, 7.0, dtype=F64), 1e-3)
    assert torch.equal(w, expected_idiz(*shape, 1e-3))


def test_idiz_square_is_eps_times_identity_minus_cyclic_shift():
    w = idiz_(torch.empty(4, 4, dtype=F64), 0.5)
    shift = torch.roll(torch.eye(4, dtype=F64), 1, dims=1)  # ones at (m, m+1 mod 4)
    assert torch.equal(w, 0.5 * (torch.eye(4, dtype=F64) - shift))


@pytest.mark.parametrize("shape", [(6, 4), (16, 16), (10, 32), (5, 7), (48, 16)])
def test_idiz_output_is_order_eps(shape):
    eps = 1e-6
    w = idiz_(torch.empty(shape), eps)
    nz = (w != 0).sum(1)
    assert torch.equal(nz, torch.full((shape[0],), 2)), "each row: one +eps and one -eps"
    assert torch.equal(w.sum(1), torch.zeros(shape[0])), "rows sum to exactly zero"
    x = 3.0 + torch.randn(shape[1], 256, generator=gen(1))     # non-zero mean inputs
    y = w @ x
    assert y.abs().max() <= 2 * eps * x.abs().max()
    assert y.abs().max() > 0
    assert abs(y.mean().item()) < 0.2 * eps, "mean ~0 although the inputs' mean is 3"
    exact = idiz_(torch.empty(shape), 2.0 ** -20)                 # power of two: products are exact
    assert torch.equal(exact @ torch.full((shape[1], 1), 5.0), torch.zeros(shape[0], 1))


def test_idiz_zero_eps_is_plain_zero():
    assert not idiz_(torch.ones(5, 8), 0.0).any()


# ----------------------------------------------------------------------------- IDIC


def test_idic_patch_maintain_outputs_reproduce_input_patches():
    c_in, k = 2, 3
    c_out = k * k * c_in                                   # square C: an identity on patches
    w = idic_(torch.empty(c_out, c_in, k, k, dtype=F64), 1.0, mode="patch")
    x = torch.randn(2, c_in, 6, 5, generator=gen(), dtype=F64)
    out = F.conv2d(x, w, padding=k // 2)                   # (2, c_out, 6, 5)
    patches = F.unfold(x, k, padding=k // 2)               # (2, c_in*k*k, 30), channel-major
    # the paper's C in R^{k x k x c_in x c_out} order: tap (a, b) major, channel fastest
    patches = patches.reshape(2, c_in, k * k, -1).transpose(1, 2).reshape(2, c_out, -1)
    assert torch.equal(out.reshape(2, c_out, -1), patches)
    # and concretely: output channel (a*k + b)*c_in + c is input channel c through tap (a, b)
    xp = F.pad(x, (1, 1, 1, 1))
    for a in range(k):
        for b in range(k):
            for c in range(c_in):
                assert torch.equal(out[:, (a * k + b) * c_in + c], xp[:, c, a:a + 6, b:b + 5])


def test_idic_patch_square_channels_keeps_every_channel_shifted():
    c = 4
    w = idic_(torch.empty(c, c, 3, 3, dtype=F64), 1.0)
    x = torch.randn(1, c, 5, 5, generator=gen(), dtype=F64)
    out = F.conv2d(x, w, padding=1)
    assert torch.equal(out[:, :, 1:, 1:], x[:, :, :-1, :-1]), "corner tap: shift by (1, 1)"
    assert not out[:, :, 0].any() and not out[:, :, :, 0].any()


def test_idic_patch_replicas_get_different_shifts():
    c_in = 3
    w = idic_(torch.empty(2 * c_in, c_in, 3, 3, dtype=F64), 1.0)
    x = torch.randn(1, c_in, 6, 6, generator=gen(), dtype=F64)
    out = F.conv2d(x, w, padding=1)
    xp = F.pad(x, (1, 1, 1, 1))
    assert torch.equal(out[:, :c_in], xp[:, :, 0:6, 0:6])    # tap (0, 0)
    assert torch.equal(out[:, c_in:], xp[:, :, 0:6, 1:7])    # tap (0, 1)


def test_idic_patch_raw_is_the_literal_reshape_of_the_papers_matrix():
    """The other reading of Sec. 3.1.3: C (c_out x kkc_in, IDI: C[m, m] = 1) reshaped as is to k x k x c_in x c_out.
    For c_in = c_out = 4, k = 3: entry (m, m) sits at flat index 37 m = ((a*3 + b)*4 + c)*4 + o, so output
    channel m copies input channel m through tap (a, b) = divmod(37 m // 16, 3): (0,0), (0,2), (1,1), (2,0)."""
    c = 4
    w = idic_(torch.empty(c, c, 3, 3, dtype=F64), 1.0, mode="patch-raw")
    x = torch.randn(1, c, 5, 5, generator=gen(), dtype=F64)
    out = F.conv2d(x, w, padding=1)
    xp = F.pad(x, (1, 1, 1, 1))
    for m, (a, b) in enumerate([(0, 0), (0, 2), (1, 1), (2, 0)]):
        assert torch.equal(out[:, m], xp[:, m, a:a + 5, b:b + 5]), m
    default = F.conv2d(x, idic_(torch.empty(c, c, 3, 3, dtype=F64), 1.0), padding=1)
    assert not torch.equal(out, default)  # the two readings differ: the choice is a parameter (init.conv)


def test_idinit_conv_param_selects_the_reading_for_idic_and_idizc():
    from explorer.init_schemes import idinit

    patch, raw = torch.empty(4, 4, 3, 3, dtype=F64), torch.empty(4, 4, 3, 3, dtype=F64)
    idinit(patch, "stem.in", gen(), conv="patch", loose_std=0.0)
    idinit(raw, "stem.in", gen(), conv="patch-raw", loose_std=0.0)
    assert torch.equal(raw, idic_(torch.empty(4, 4, 3, 3, dtype=F64), 1.0, mode="patch-raw"))
    assert not torch.equal(patch, raw)
    end = torch.empty(4, 4, 3, 3, dtype=F64)
    idinit(end, "stem.out", gen(), conv="patch-raw")  # IDIZC in the same layout: constant inputs map to 0
    assert torch.allclose(F.conv2d(torch.ones(1, 4, 5, 5, dtype=F64), end)[0], torch.zeros(4, 3, 3, dtype=F64), atol=1e-15)


@pytest.mark.parametrize("k", [1, 3, 5])
def test_idic_channel_maintain_is_exact_identity(k):
    c = 5
    w = idic_(torch.empty(c, c, k, k, dtype=F64), 1.0, mode="channel")
    x = torch.randn(3, c, 7, 6, generator=gen(), dtype=F64)
    assert torch.equal(F.conv2d(x, w, padding=k // 2), x)
    assert (w != 0).sum() == c


def test_idic_channel_maintain_pads_identity_at_centre():
    w = idic_(torch.empty(6, 4, 3, 3, dtype=F64), 2.0, mode="channel")
    assert torch.equal(w[:, :, 1, 1], expected_idi(6, 4, 2.0))
    w[:, :, 1, 1] = 0
    assert not w.any()


def test_idi_on_a_kernel_is_patch_idic():
    a = idi_(torch.empty(8, 2, 3, 3, dtype=F64), 1.0)
    b = idic_(torch.empty(8, 2, 3, 3, dtype=F64), 1.0, mode="patch")
    assert torch.equal(a, b)


def test_idizc_maps_constant_inputs_to_zero_and_random_ones_to_order_eps():
    eps = 1e-6
    w = idizc_(torch.empty(16, 16, 3, 3), eps)
    matrix = w.permute(0, 2, 3, 1).reshape(16, -1)           # back to the paper's (c_out, k*k*c_in)
    assert torch.equal(matrix.double(), expected_idiz(16, 144, eps).float().double())
    exact = idizc_(torch.empty(16, 16, 3, 3), 2.0 ** -20)        # power of two: products are exact
    assert torch.equal(F.conv2d(torch.full((1, 16, 5, 5), 4.0), exact), torch.zeros(1, 16, 3, 3))
    x = 2.0 + torch.randn(4, 16, 8, 8, generator=gen())
    y = F.conv2d(x, w, padding=1)
    assert 0 < y.abs().max() <= 2 * eps * x.abs().max()
    assert torch.equal(idiz_(torch.empty(16, 16, 3, 3), eps), w)


# ----------------------------------------------------------------------------- ZerO


def test_hadamard_is_orthogonal_up_to_scale():
    for n, size in [(1, 1), (2, 2), (5, 8), (8, 8), (33, 64)]:
        h = hadamard(n)
        assert h.shape == (size, size)
        assert set(h.unique().tolist()) <= {-1.0, 1.0}
        assert torch.equal(h @ h.T, size * torch.eye(size, dtype=F64))


def test_zero_square_is_identity_and_wide_is_partial_identity():
    assert torch.equal(zero_hadamard_(torch.empty(7, 7, dtype=F64)), torch.eye(7, dtype=F64))
    assert torch.equal(zero_hadamard_(torch.empty(3, 8, dtype=F64)), torch.eye(3, 8, dtype=F64))


@pytest.mark.parametrize("shape", [(8, 3), (20, 6), (33, 5), (48, 16), (17, 16), (64, 63)])
def test_zero_dimension_increasing_has_full_column_rank(shape):
    w = zero_hadamard_(torch.empty(shape, dtype=F64))
    assert torch.linalg.matrix_rank(w).item() == shape[1]
    m = math.ceil(math.log2(shape[0]))
    assert torch.equal(w, 2 ** (-(m - 1) / 2) * hadamard(shape[0])[: shape[0], : shape[1]])


def test_zero_scheme_roles_and_conv():
    assert not zero(torch.ones(6, 6), "stem.out", gen()).any()
    assert torch.equal(zero(torch.empty(6, 6), "stem.in", gen()), torch.eye(6))
    k = zero(torch.empty(4, 4, 3, 3, dtype=F64), "main", gen())
    x = torch.randn(1, 4, 5, 5, generator=gen(), dtype=F64)
    assert torch.equal(F.conv2d(x, k, padding=1), x)


# ----------------------------------------------------------------------------- Fixup


def test_fixup_scale():
    assert fixup_scale(16, 2) == pytest.approx(0.25)
    assert fixup_scale(81, 3) == pytest.approx(1 / 3)
    assert fixup_scale(8, 1) == 1.0
    with pytest.raises(ValueError):
        fixup_scale(0, 2)


def test_fixup_scheme():
    assert not fixup(torch.ones(8, 16), "stem.out", gen()).any()
    assert not fixup(torch.ones(10, 16), "head", gen()).any()
    w = fixup(torch.empty(400, 300, dtype=F64), "stem.in", gen(), n_branches=16, layers_per_branch=2)
    expected = math.sqrt(2 / 300) * 0.25
    assert abs(w.std().item() / expected - 1) < 0.02 and abs(w.mean().item()) < 0.01 * expected
    e = fixup(torch.empty(400, 300, dtype=F64), "embed", gen(), n_branches=16, layers_per_branch=2)
    assert abs(e.std().item() / math.sqrt(2 / 300) - 1) < 0.02


# ----------------------------------------------------------------------------- IDInit scheme


def test_idinit_scheme_by_role():
    g = gen()
    assert torch.equal(idinit(torch.empty(6, 4, dtype=F64), "embed", g, loose_std=0.0),
                       expected_idi(6, 4, math.sqrt(2.0)))
    assert torch.equal(idinit(torch.empty(6, 6, dtype=F64), "main", g, loose_std=0.0), torch.eye(6, dtype=F64))
    assert torch.equal(idinit(torch.empty(12, 6, dtype=F64), "stem.in", g, loose_std=0.0), expected_idi(12, 6, 1.0))
    assert torch.equal(idinit(torch.empty(6, 12, dtype=F64), "stem.out", g), expected_idiz(6, 12, 1e-6))
    assert torch.equal(idinit(torch.empty(3, 6, dtype=F64), "head", g), expected_idiz(3, 6, 1e-6))
    conv = idinit(torch.empty(4, 4, 3, 3, dtype=F64), "main", g, loose_std=0.0, conv="channel")
    assert torch.equal(conv, idic_(torch.empty(4, 4, 3, 3, dtype=F64), 1.0, mode="channel"))
    convz = idinit(torch.empty(4, 4, 3, 3, dtype=F64), "stem.out", g)
    assert torch.equal(convz, idizc_(torch.empty(4, 4, 3, 3, dtype=F64), 1e-6))
    loose = idinit(torch.empty(6, 6, dtype=F64), "main", g)          # default: loose, std 1e-6
    assert not torch.equal(loose, torch.eye(6, dtype=F64)) and (loose - torch.eye(6, dtype=F64)).abs().max() < 1e-5
    with pytest.raises(ValueError, match="not a weight role"):
        idinit(torch.empty(4), "norm", g)


# ----------------------------------------------------------------------------- determinism


def test_deterministic_given_generator_and_global_rng_untouched():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    calls = [
        lambda g: idi_(torch.empty(20, 7), 1.0, loose_std=0.1, gen=g),
        lambda g: idic_(torch.empty(6, 3, 3, 3), 1.0, loose_std=0.1, gen=g),
        lambda g: idinit(torch.empty(9, 9), "main", g),
        lambda g: fixup(torch.empty(9, 5), "stem.in", g),
        lambda g: zero(torch.empty(9, 5), "main", g),
        lambda g: idiz_(torch.empty(5, 9), gen=g),
    ]
    for call in calls:
        a, b = call(gen(7)), call(gen(7))
        assert torch.equal(a, b)
    for call in calls[:4]:                                      # the random ones depend on the seed
        assert not torch.equal(call(gen(7)), call(gen(8)))
    assert torch.equal(torch.get_rng_state(), state), "no scheme may touch the global RNG"
    g = gen(5)
    idiz_(torch.empty(5, 9), gen=g)
    zero(torch.empty(9, 5), "main", g)
    idi_(torch.empty(5, 5), gen=g)
    assert torch.equal(g.get_state(), gen(5).get_state()), "deterministic schemes draw nothing"


# ----------------------------------------------------------------------------- Figure 4: rank constraint


D0 = 64  # sklearn's 8x8 digits: the MNIST-like data of Figure 4, at D0 = 64 < Dh = 128


def _rank_experiment(pad_identity: bool, seed: int = 0, steps: int = 200):
    """3-layer linear classifier theta2 theta1 theta0 x on digits (Figure 4, Sec. 3.1.2), minibatch SGD."""
    import explorer

    data = explorer.build(explorer.ExperimentSpec.from_dict({"data": {"name": "digits"}}))[1]
    inputs, labels = data.x_train.double(), data.y_train
    d0, dh, dl = D0, 128, 10
    g = gen(seed)
    t0 = torch.empty(dh, d0, dtype=F64)
    if pad_identity:
        idi_(t0)                                                # [I; I; I]
    else:
        t0.zero_()
        t0[:d0] = torch.eye(d0, dtype=F64)                      # partial identity [I; 0; 0]
    t1 = torch.eye(dh, dtype=F64)
    t2 = idi_(torch.empty(dl, dh, dtype=F64))                   # Eq. 3: [I, 0] (Theorem 3.1's theta^(2))
    params = [t.requires_grad_() for t in (t0, t1, t2)]
    opt = torch.optim.SGD(params, lr=0.05)
    for _ in range(steps):
        index = torch.randint(len(inputs), (32,), generator=g)
        loss = F.cross_entropy(inputs[index] @ t0.T @ t1.T @ t2.T, labels[index])
        opt.zero_grad()
        loss.backward()
        opt.step()
    s = torch.linalg.svdvals(t1.detach() - torch.eye(dh, dtype=F64))
    return int((s > 1e-6 * s[0]).sum()), loss.item()


def test_rank_constraint_zero_padding_vs_padding_identity():
    d0 = D0
    rank_zero, loss_zero = _rank_experiment(pad_identity=False)
    rank_idi, loss_idi = _rank_experiment(pad_identity=True)
    assert rank_zero <= d0, f"zero padding: rank(theta1 - I) = {rank_zero} should be <= D0 = {d0}"
    assert rank_idi > d0, f"padding identity: rank(theta1 - I) = {rank_idi} should exceed D0 = {d0} " \
                          f"(zero padding gave {rank_zero})"
    assert loss_idi < loss_zero, f"losses: padding identity {loss_idi:.3g}, zero padding {loss_zero:.3g}"


# ----------------------------------------------------------------------------- Figure 5: dead weights


@pytest.mark.parametrize("last", ["zeros", "idiz"])
def test_dead_weights_zero_vs_idiz(last):
    width, hidden = 16, 32
    g = gen(2)
    w1 = idi_(torch.empty(hidden, width, dtype=F64)).requires_grad_()      # role stem.in
    w2 = torch.zeros(width, hidden, dtype=F64)                             # role stem.out
    if last == "idiz":
        idiz_(w2, 1e-6)
    w2.requires_grad_()
    x = torch.randn(64, width, generator=g, dtype=F64)
    y = torch.randn(64, width, generator=g, dtype=F64)
    out = x + F.relu(x @ w1.T) @ w2.T                                      # x + f(x)
    ((out - y) ** 2).mean().backward()
    dead = int((w1.grad == 0).sum())
    if last == "zeros":
        assert dead == w1.numel(), f"zero W2: {dead} of {w1.numel()} W1 entries got exactly zero gradient"
    else:
        assert dead == 0, f"IDIZ W2: {dead} of {w1.numel()} W1 entries got exactly zero gradient (expected 0)"
        assert w1.grad.abs().max() < 1e-4, "the gradient through IDIZ is O(eps)"


# ----------------------------------------------------------------------------- parameter range ends


def _range_ends():
    """(scheme, parameter, value) for every numeric parameter of every registered scheme, at both range ends."""
    import explorer

    return [(name, p.name, end) for name, entry in explorer.registry("inits").items() for p in entry.params
            if p.kind in ("int", "float", "rule") for end in (p.low, p.high) if end is not None]


def _model_for(scheme: str) -> dict:
    """A small model the scheme applies to (its own check refuses the others)."""
    import explorer

    spec = explorer.ExperimentSpec.default()
    for changes in ({"model.depth": 2, "model.width": 16},
                    {"model.name": "gpt", "model.depth": 1, "model.width": 16, "data.name": "text",
                     "data.max_chars": 4000, "data.context": 8},
                    {"model.name": "resnet-cifar", "model.depth": 8, "model.width": 4, "data.name": "digits-images"}):
        try:
            spec.with_values({**changes, "init.name": scheme})
            return changes
        except explorer.SpecError:
            continue
    raise AssertionError(f"no small model takes init {scheme}")


@pytest.mark.parametrize("scheme, name, value", _range_ends())
def test_every_value_a_spec_accepts_initialises(scheme, name, value):
    """A value inside a parameter's declared range either builds a model with finite weights or is refused at
    spec validation by a SpecError naming that parameter: never an error from inside the scheme."""
    import explorer

    changes = {**_model_for(scheme), "init.name": scheme, f"init.{name}": value}
    try:
        spec = explorer.ExperimentSpec.default().with_values(changes)
    except explorer.SpecError as refused:
        assert refused.path == f"init.{name}" and "use a value in" in refused.message, refused
        return
    model, _ = explorer.build(spec)
    assert all(torch.isfinite(p).all() for p in model.parameters())
