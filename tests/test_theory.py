"""Closed-form results of the papers (explorer.theory), checked against independent computations."""

import math

import numpy as np
import pytest

from explorer import theory as T

# --------------------------------------------------------------------------- helpers (independent)


def tail_energy(M, k):
    """sum_{i>k} sigma_i(M)^2 straight from numpy's SVD."""
    return float(np.sum(np.linalg.svd(M, compute_uv=False)[k:] ** 2))


def numerical_rank(M, tol=1e-8):
    s = np.linalg.svd(M, compute_uv=False)
    return int(np.sum(s > tol * max(1.0, s[0])))


def random_target(rng, d, kind):
    """A target A with a random spectrum: generic, or A - I symmetric PSD, or A - I low-rank-ish."""
    U, _ = np.linalg.qr(rng.normal(size=(d, d)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    if kind == "generic":
        return rng.normal(size=(d, d)) * rng.uniform(0.2, 3.0)
    if kind == "psd":
        lam = rng.uniform(0.5, 4.0, size=d)
        return np.eye(d) + (U * lam) @ U.T
    s = np.sort(rng.exponential(size=d) * rng.choice([0.3, 1.0, 5.0]))[::-1]
    return np.eye(d) + (U * s) @ V.T


def psd_target(rng, d, lam_min, lam_max):
    """A with A - I symmetric, eigenvalues in [lam_min, lam_max], both ends attained."""
    U, _ = np.linalg.qr(rng.normal(size=(d, d)))
    lam = rng.uniform(lam_min, lam_max, size=d)
    lam[0], lam[-1] = lam_min, lam_max
    return np.eye(d) + (U * lam) @ U.T


def scale(A):
    return max(1.0, float(np.sum(A ** 2)))


# --------------------------------------------------------------------------- DCA: Eckart-Young


def test_eckart_young_matches_truncated_svd_and_beats_random_rank_k():
    rng = np.random.default_rng(0)
    for shape, k in [((6, 6), 2), ((5, 8), 3), ((7, 4), 1), ((4, 4), 0), ((4, 4), 4)]:
        M = rng.normal(size=shape)
        approx, err = T.eckart_young(M, k)
        U, s, Vt = np.linalg.svd(M)
        expected = sum(s[i] * np.outer(U[:, i], Vt[i]) for i in range(k)) if k else np.zeros(shape)
        np.testing.assert_allclose(approx, expected, atol=1e-10)
        assert err == pytest.approx(float(np.sum((M - approx) ** 2)), abs=1e-10)
        assert numerical_rank(approx) <= k
        for _ in range(20):  # no random rank-k matrix (least-squares fitted) does better
            P = rng.normal(size=(shape[0], k))
            Q = np.linalg.lstsq(P, M, rcond=None)[0] if k else np.zeros((0, shape[1]))
            assert err <= float(np.sum((M - P @ Q) ** 2)) + 1e-10


def test_resnet_and_baseline_optima_are_truncated_svds():
    rng = np.random.default_rng(1)
    for _ in range(5):
        d = int(rng.integers(3, 8))
        ranks = [int(x) for x in rng.integers(1, 3, size=int(rng.integers(1, 3)))]
        r = min(sum(ranks), d)
        ranks = ranks if sum(ranks) <= d else [r]
        A = random_target(rng, d, "generic")
        res = T.optimal_resnet(A, ranks)
        assert res.excess_risk == pytest.approx(tail_energy(A - np.eye(d), r), rel=1e-10, abs=1e-12)
        assert res.excess_risk == pytest.approx(float(np.sum((A - res.matrix) ** 2)), rel=1e-10, abs=1e-12)
        assert numerical_rank(res.matrix - np.eye(d)) <= r
        base = T.optimal_baseline(A, ranks)
        assert base.excess_risk == pytest.approx(tail_energy(A, min(ranks)), rel=1e-10, abs=1e-12)
        assert numerical_rank(base.matrix) <= min(ranks)
        # the classes depend on the ranks only through r_* (ResNet) / min r_t (baseline)
        assert T.optimal_resnet(A, r).excess_risk == pytest.approx(res.excess_risk, rel=1e-12, abs=1e-14)


def test_resnet_product_of_layers_reaches_the_class_optimum():
    """Thm 4.1: prod_t (I + V_t) with rank V_t <= r_t spans I + rank-r_*; least squares can't beat it."""
    rng = np.random.default_rng(0)
    d, ranks = 5, [1, 1]
    A = random_target(rng, d, "lowrank")
    best = T.optimal_resnet(A, ranks).excess_risk
    # gradient descent on the actual two-layer product, from small random factors
    P = [rng.normal(scale=0.1, size=(d, 1)) for _ in ranks]
    Q = [rng.normal(scale=0.1, size=(d, 1)) for _ in ranks]
    lr = 0.2 / (np.linalg.norm(A, 2) ** 2 + 1)
    for _ in range(3000):
        V1, V2 = P[0] @ Q[0].T, P[1] @ Q[1].T
        E = (np.eye(d) + V2) @ (np.eye(d) + V1) - A
        G2 = E @ (np.eye(d) + V1).T
        G1 = (np.eye(d) + V2).T @ E
        P[0], Q[0] = P[0] - lr * 2 * G1 @ Q[0], Q[0] - lr * 2 * G1.T @ P[0]
        P[1], Q[1] = P[1] - lr * 2 * G2 @ Q[1], Q[1] - lr * 2 * G2.T @ P[1]
    V1, V2 = P[0] @ Q[0].T, P[1] @ Q[1].T
    gd = float(np.sum(((np.eye(d) + V2) @ (np.eye(d) + V1) - A) ** 2))
    assert best <= gd + 1e-9
    assert gd <= best * 1.05 + 1e-6  # and the product architecture does reach it


def test_grn_v1_matches_a_dense_scan_over_alpha():
    rng = np.random.default_rng(3)
    for kind in ("generic", "lowrank", "psd"):
        d = 5
        r = int(rng.integers(1, d))
        A = random_target(rng, d, kind)
        opt = T.optimal_grn_v1(A, r)
        alpha = float(opt.diagonal[0])
        np.testing.assert_allclose(opt.diagonal, alpha)
        assert numerical_rank(opt.matrix - alpha * np.eye(d)) <= r
        assert opt.excess_risk == pytest.approx(float(np.sum((A - opt.matrix) ** 2)), rel=1e-9, abs=1e-12)
        R = np.linalg.norm(A, 2) + 5.0
        alphas = np.linspace(-R, R, 20001)
        s = np.linalg.svd(A[None] - alphas[:, None, None] * np.eye(d), compute_uv=False)
        scan = np.sum(s[:, r:] ** 2, axis=1)
        assert opt.excess_risk <= scan.min() + 1e-9
        assert opt.excess_risk >= scan.min() - 1e-3 * scale(A)


def gd_diag_plus_lowrank(A, r, rng, starts=5, steps=500):
    """Plain gradient descent on ||A - diag(D) - P Q^T||^2 from random starts (tiny cases only)."""
    d = A.shape[0]
    best = np.inf
    lr = 0.01
    for _ in range(starts):
        D = rng.normal(size=d)
        P, Q = rng.normal(size=(d, r)), rng.normal(size=(d, r))
        for _ in range(steps):
            E = np.diag(D) + P @ Q.T - A
            D, P, Q = D - lr * 2 * np.diag(E), P - lr * 2 * E @ Q, Q - lr * 2 * E.T @ P
        best = min(best, float(np.sum((A - np.diag(D) - P @ Q.T) ** 2)))
    return best


def test_grn_v2_is_feasible_and_at_least_as_good_as_gradient_descent():
    rng = np.random.default_rng(4)
    for _ in range(2):
        d, r = 4, 1
        A = random_target(rng, d, "generic")
        opt = T.optimal_grn_v2(A, r)
        np.testing.assert_allclose(opt.matrix, np.diag(opt.diagonal) + opt.low_rank, atol=1e-12)
        assert numerical_rank(opt.low_rank) <= r
        assert opt.excess_risk == pytest.approx(float(np.sum((A - opt.matrix) ** 2)), rel=1e-9, abs=1e-12)
        gd = gd_diag_plus_lowrank(A, r, rng)
        assert opt.excess_risk <= gd * (1 + 1e-4) + 1e-9


def test_grn_v3_risk_matches_monte_carlo_and_its_relu_weight_is_optimal():
    rng = np.random.default_rng(5)
    d, r = 4, 1
    A = random_target(rng, d, "psd")
    opt = T.optimal_grn_v3(A, r)
    assert opt.relu_weight is not None and np.linalg.norm(opt.relu_weight) > 0
    assert numerical_rank(opt.low_rank) <= r
    x = rng.normal(size=(60_000, d))

    def mc_risk(w):
        pred = x @ opt.matrix.T + np.maximum(x @ w, 0.0)[:, None] * x
        return float(np.mean(np.sum((x @ A.T - pred) ** 2, axis=1)))

    base = mc_risk(opt.relu_weight)
    assert base == pytest.approx(opt.excess_risk, rel=0.03)
    for _ in range(3):  # same samples: a perturbed w is worse (beyond MC noise)
        w = opt.relu_weight + rng.normal(scale=0.3 * np.linalg.norm(opt.relu_weight), size=d)
        assert mc_risk(w) > base - 0.01 * base
    # relu_term_risk against the same Monte Carlo, for a B the ReLU term fits well
    B = 2.0 * np.eye(d) + 0.3 * rng.normal(size=(d, d))
    risk, w = T.relu_term_risk(B)
    assert risk < 0.8 * float(np.sum(B ** 2))

    def mc_b(w):
        pred = np.maximum(x @ w, 0.0)[:, None] * x
        return float(np.mean(np.sum((x @ B.T - pred) ** 2, axis=1)))

    assert mc_b(w) == pytest.approx(risk, rel=0.02)
    # Lemma B.1 (B.6): E[relu(w^T x)^2 ||x||^2] = ||w||^2 (d+2)/2, not the printed (d+1)/2
    u = w / np.linalg.norm(w)
    assert float(np.mean(np.maximum(x @ u, 0.0) ** 2 * np.sum(x ** 2, axis=1))) == pytest.approx((d + 2) / 2, rel=0.03)
    assert mc_b(w) < min(mc_b(0.85 * w), mc_b(1.15 * w))
    assert T.relu_term_risk(-np.eye(d)) == (float(d), pytest.approx(np.zeros(d)))  # c < 0: w = 0


def test_theorem_4_2_bounds_hold_against_the_optima_on_random_problems():
    rng = np.random.default_rng(6)
    kinds = ("generic", "psd", "lowrank")
    for trial in range(20):
        d = int(rng.integers(3, 8))
        ranks = [int(x) for x in rng.integers(1, 3, size=int(rng.integers(1, 3)))]
        if sum(ranks) >= d:
            ranks = [int(rng.integers(1, d))]
        r = sum(ranks)
        A = random_target(rng, d, kinds[trial % 3])
        tol = 1e-9 * scale(A)
        bounds = T.excess_risk_bounds(A, ranks)
        opt = T.optimal_excess_risks(A, ranks)
        # independent value of ER*(C_res) and Theorem 4.2's first line (equality)
        assert opt.resnet.excess_risk == pytest.approx(tail_energy(A - np.eye(d), r), rel=1e-9, abs=1e-12)
        assert bounds.resnet == pytest.approx(opt.resnet.excess_risk, rel=1e-9, abs=1e-12)
        assert opt.grn_v1.excess_risk <= bounds.grn_v1 + tol
        assert opt.grn_v2.excess_risk <= bounds.grn_v2 + tol
        assert opt.grn_v3.excess_risk <= bounds.grn_v3 + tol
        assert bounds.grn_v3 <= bounds.grn_v2 + tol <= bounds.grn_v1 + 2 * tol <= bounds.resnet + 3 * tol
        # GRN is never worse than ResNet at the same collective rank (nested classes)
        assert opt.grn_v1.excess_risk <= opt.resnet.excess_risk + tol
        assert opt.grn_v2.excess_risk <= opt.grn_v1.excess_risk + tol
        assert opt.grn_v3.excess_risk <= opt.grn_v2.excess_risk + tol
        # each linear optimum is a feasible member of its class with that risk
        for o in (opt.resnet, opt.grn_v1, opt.grn_v2):
            assert numerical_rank(o.low_rank) <= r
            np.testing.assert_allclose(o.matrix, np.diag(o.diagonal) + o.low_rank, atol=1e-9)
            assert o.excess_risk == pytest.approx(float(np.sum((A - o.matrix) ** 2)), rel=1e-8, abs=1e-10)
        # GRN-v1 against an independent scan of alpha
        alphas = np.linspace(-np.linalg.norm(A, 2) - 3, np.linalg.norm(A, 2) + 3, 1001)
        s = np.linalg.svd(A[None] - alphas[:, None, None] * np.eye(d), compute_uv=False)
        assert opt.grn_v1.excess_risk <= np.sum(s[:, r:] ** 2, axis=1).min() + tol


def test_theorem_4_2_bounds_in_spectral_form_for_symmetric_psd_targets():
    """For A - I symmetric PSD, App. C rewrites the v1 bound as sum sigma^2 - (sum sigma)^2/(d - r)."""
    rng = np.random.default_rng(7)
    for _ in range(5):
        d = int(rng.integers(3, 9))
        r = int(rng.integers(1, d))
        A = psd_target(rng, d, 0.5, 3.0)
        sig = np.sort(np.linalg.eigvalsh(A - np.eye(d)))[::-1][r:]
        b = T.excess_risk_bounds(A, r)
        assert b.resnet == pytest.approx(float(np.sum(sig ** 2)), rel=1e-10)
        t1 = np.sum(sig) ** 2 / (d - r)
        assert b.grn_v1 == pytest.approx(float(np.sum(sig ** 2) - t1), rel=1e-9, abs=1e-10)
        # v3: nu_max = sigma_{r+1} - mean of the tail (App. C); nu~ from Delta's off-diagonal part
        lam, U = np.linalg.eigh(A - np.eye(d))
        Ut, lt = U[:, ::-1][:, r:], lam[::-1][r:]
        delta = (Ut * lt) @ Ut.T
        diag2 = float(np.sum(np.diag(delta) ** 2))
        nu_t = float(np.linalg.eigvalsh(delta - np.diag(np.diag(delta)))[-1])
        for printed, c in ((False, math.pi * (d + 2)), (True, math.pi * (d + 1))):
            choice1 = t1 + (sig[0] - sig.mean()) ** 2 / c
            choice2 = diag2 + nu_t ** 2 / c
            bound = T.excess_risk_bounds(A, r, as_printed=printed).grn_v3
            assert bound == pytest.approx(float(np.sum(sig ** 2) - max(choice1, choice2)), rel=1e-9, abs=1e-10)
        assert b.grn_v2 == pytest.approx(float(np.sum(sig ** 2) - max(t1, diag2)), rel=1e-9, abs=1e-10)


def test_grn_v1_optimum_does_not_depend_on_the_rank_split():
    rng = np.random.default_rng(8)
    A = random_target(rng, 6, "generic")
    a = T.optimal_grn_v1(A, [1, 1, 2]).excess_risk
    b = T.optimal_grn_v1(A, 4).excess_risk
    assert a == pytest.approx(b, rel=1e-12, abs=1e-14)


# --------------------------------------------------------------------------- DCA: Theorem 4.3


def test_lemma_c1_rank_lower_bounds_hold_for_every_equal_parameter_architecture():
    for d in (8, 32, 128):
        for r in range(1, d):
            lb = T.equal_parameter_rank_lower_bounds(d, r)
            for t in range(1, 2 * d):
                # 2 d r' + T(T-1)/2 = 2 d r_* ; r' >= T (each layer has rank >= 1)
                r1 = r - t * (t - 1) / (4 * d)
                if r1 >= t:
                    assert r1 >= lb.grn_v1 - 1e-9
                r2 = r - t * (t - 1) / 4  # 2 d r'' + d T(T-1)/2 = 2 d r_*
                if r2 >= t:
                    assert r2 >= lb.grn_v2 - 1e-9
                r3 = r - t * (t + 1) / 4  # 2 d r''' + d T(T-1)/2 + d T = 2 d r_*
                if r3 >= t:
                    assert r3 >= lb.grn_v3 - 1e-9
            assert lb.grn_v1 <= r and lb.grn_v2 <= r and lb.grn_v3 <= r


def test_parameter_counts():
    assert T.parameter_count(10, [2, 3], "resnet") == 2 * 10 * 5
    assert T.parameter_count(10, [2, 3, 1], "grn_v1") == 2 * 10 * 6 + 3
    assert T.parameter_count(10, [2, 3, 1], "grn_v2") == 2 * 10 * 6 + 10 * 3
    assert T.parameter_count(10, [2, 3, 1], "grn_v3") == 2 * 10 * 6 + 10 * 3 + 10 * 3


def test_gain_lower_bounds_hold_for_the_optima_at_equal_parameter_count():
    """Thm 4.3(ii): ER*(res, r_*) - ER*(GRN, r') >= G_lb for the least r' Lemma C.1 allows."""
    rng = np.random.default_rng(9)
    for _ in range(4):
        d = int(rng.integers(5, 9))
        lam_max = float(rng.uniform(1.0, 5.0))
        lam_min = lam_max * float(rng.uniform(0.2, 0.95))
        A = psd_target(rng, d, lam_min, lam_max)
        r = int(rng.integers(1, d))
        tol = 1e-8 * scale(A)
        lb = T.equal_parameter_rank_lower_bounds(d, r)
        g = T.gain_lower_bounds(d, r, lam_min, lam_max)
        res = T.optimal_resnet(A, r).excess_risk
        r1, r2, r3 = (min(r, max(0, math.ceil(x - 1e-12))) for x in (lb.grn_v1, lb.grn_v2, lb.grn_v3))
        assert res - T.optimal_grn_v1(A, r1).excess_risk >= g.g1 - tol
        assert res - T.optimal_grn_v2(A, r2).excess_risk >= g.g2 - tol
        assert res - T.optimal_grn_v3(A, r3).excess_risk >= g.g3 - tol


def test_gains_change_sign_at_the_thresholds():
    for d in (10, 50, 200):
        for kappa in (0.1, 0.3, 0.5, 0.7, 0.9):
            th = T.rank_thresholds(d, kappa)
            r = np.linspace(0.0, d - 1e-6, 4001)
            g = T.gain_lower_bounds(d, r, 10.0 * kappa, 10.0)
            away1 = np.abs(r - th.grn_v1) > 1e-6 * d
            away2 = np.abs(r - th.grn_v2) > 1e-6 * d
            # (4.1)/(4.2): the G1/G2 lower bounds are positive exactly below the thresholds
            np.testing.assert_array_equal((g.g1 > 0)[away1], (r < th.grn_v1)[away1])
            np.testing.assert_array_equal((g.g2 > 0)[away2], (r < th.grn_v2)[away2])
            # (4.3) is not the exact zero of the G3 bound, but it sits next to it
            assert np.all(g.g3[r <= 0.9 * th.grn_v3] > 0)
            assert np.all(g.g3[r >= 1.1 * th.grn_v3 + 1.0] < 0)
            assert np.all(np.diff(g.g1) < 0) and np.all(np.diff(g.g2) < 0) and np.all(np.diff(g.g3) < 0)
    # kappa = 1 (lambda_min = lambda_max = lam): the rank terms vanish
    d, r, lam = 20, 7, 3.0
    g = T.gain_lower_bounds(d, r, lam, lam)
    assert g.g1 == pytest.approx((d - r) * lam ** 2) and g.g2 == pytest.approx((d - r) * lam ** 2)
    assert g.g3 == pytest.approx((d - r - 1 / (2 * math.pi * (d + 2))) * lam ** 2)
    assert T.gain_lower_bounds(d, r, lam, lam, as_printed=True).g3 == pytest.approx(
        (d - r - 1 / (2 * math.pi * (d + 1))) * lam ** 2)


def test_thresholds_increase_with_kappa_and_dimension():
    kappas = np.linspace(0.01, 1.0, 50)
    previous = None
    for d in (10, 100, 1000):
        th = T.rank_thresholds(d, kappas)
        for v in (th.grn_v1, th.grn_v2, th.grn_v3):
            assert np.all(np.diff(v) > 0)
        if previous is not None:
            # in d too, except (4.3) at tiny kappa, where it is negative (no useful r_*) and falls
            useful = kappas >= 0.1
            for v, p in zip((th.grn_v1, th.grn_v2, th.grn_v3), previous):
                assert np.all(v[useful] > p[useful])
        previous = (th.grn_v1, th.grn_v2, th.grn_v3)
    assert T.rank_thresholds(10, 0.01).grn_v3 < 0 < T.rank_thresholds(10, 0.1).grn_v3
    # kappa = 1 (A - I a multiple of I): GRN-v1 is better for every r_* < d, i.e. ratio 1
    assert T.rank_thresholds(10, 1.0).grn_v1 == pytest.approx((1 + (math.sqrt(2) - 1)) ** 2 * 10 - 10)


def test_proposition_4_4_equal_error_rank():
    """At the Prop. 4.4 collective rank, GRN-v1 is already no worse than ResNet at r_*."""
    rng = np.random.default_rng(10)
    for _ in range(4):
        d = 8
        lam_max = 3.0
        kappa = float(rng.uniform(0.3, 0.9))
        A = psd_target(rng, d, kappa * lam_max, lam_max)
        r = int(rng.integers(2, d))
        r_v1, _ = T.equal_error_collective_rank(d, r, kappa)
        assert r_v1 < r
        r_small = max(0, math.ceil(r_v1 - 1e-12))
        assert T.optimal_grn_v1(A, r_small).excess_risk <= T.optimal_resnet(A, r).excess_risk + 1e-9


def test_figure5_curves():
    fig = T.figure5_curves(dims=(100, 400), points=60)
    assert fig.g1_vs_ratio.shape == (2, 60) and fig.g2_vs_kappa.shape == (2, 60)
    i = 17
    g = T.gain_lower_bounds(400, fig.ratios[i] * 400, 5.0, 10.0)
    assert fig.g1_vs_ratio[1, i] == pytest.approx(g.g1) and fig.g2_vs_ratio[1, i] == pytest.approx(g.g2)
    g = T.gain_lower_bounds(100, 50, fig.kappas[i] * 10.0, 10.0)
    assert fig.g1_vs_kappa[0, i] == pytest.approx(g.g1) and fig.g3_vs_kappa[0, i] == pytest.approx(g.g3)
    # left: gains fall with r_*/d; right: rise with kappa; larger d gains more
    assert np.all(np.diff(fig.g1_vs_ratio, axis=1) < 0) and np.all(np.diff(fig.g2_vs_ratio, axis=1) < 0)
    assert np.all(np.diff(fig.g1_vs_kappa, axis=1) > 0) and np.all(np.diff(fig.g2_vs_kappa, axis=1) > 0)
    pos = fig.g1_vs_ratio[0] > 0
    assert pos.any() and np.all(fig.g1_vs_ratio[1][pos] > fig.g1_vs_ratio[0][pos])
    assert np.all(fig.g2_vs_kappa[1][1:] > fig.g2_vs_kappa[0][1:])  # equal at kappa = 0 (lambda_min = 0)


def test_dca_argument_validation():
    A = np.eye(4) * 2
    with pytest.raises(ValueError, match="A must be a square"):
        T.optimal_resnet(np.ones((3, 4)), 1)
    with pytest.raises(ValueError, match="r_"):
        T.excess_risk_bounds(A, 4)
    with pytest.raises(ValueError, match="ranks"):
        T.optimal_grn_v1(A, [1, -1])
    with pytest.raises(ValueError, match="kappa"):
        T.rank_thresholds(10, 1.5)
    with pytest.raises(ValueError, match="lambda_min"):
        T.gain_lower_bounds(10, 2, 5.0, 1.0)
    with pytest.raises(ValueError, match="r_star"):
        T.gain_lower_bounds(10, 10, 1.0, 2.0)


# --------------------------------------------------------------------------- tau paper


def test_norm_growth_dichotomy_tau_inverse_sqrt_depth_vs_quarter_power():
    bounded, growing = [], []
    for L in (10, 100, 1000):
        stable = T.predicted_norm_growth(L, L ** -0.5)
        unstable = T.predicted_norm_growth(L, L ** -0.25)
        assert stable.layer.shape == (L + 1,) and stable.upper[0] == 1.0 == stable.lower[0]
        assert np.all(stable.lower <= stable.upper) and np.all(unstable.lower <= unstable.upper)
        bounded.append(stable.upper[-1])
        growing.append(unstable.lower[-1])
        assert stable.upper[-1] <= math.e ** 2  # (1 + 2/L)^L < e^2 for every L
        assert unstable.lower[-1] >= L ** 0.5 * 0.99  # at least Theorem 4's L^(2c), c = 1/4
    assert max(bounded) / min(bounded) < 1.3
    assert growing[1] > 100 * growing[0] and growing[2] > 1e6 * growing[1]


def monte_carlo_norm_ratio(depth, tau, width, samples, relu, rng):
    h = rng.normal(size=(samples, width))
    if relu:
        h = np.maximum(h, 0.0)
    h0 = np.sum(h ** 2, axis=1)
    for _ in range(depth):
        W = rng.normal(scale=math.sqrt(2.0 / width), size=(samples, width, width))
        h = h + tau * np.einsum("nij,nj->ni", W, h)
        if relu:
            h = np.maximum(h, 0.0)
    return float(np.mean(np.sum(h ** 2, axis=1) / h0))


def test_linear_norm_growth_matches_monte_carlo():
    rng = np.random.default_rng(11)
    for depth, tau in ((10, 0.3), (8, 0.5)):
        pred = T.predicted_norm_growth(depth, tau, activation="linear")
        np.testing.assert_allclose(pred.upper, pred.lower)
        assert pred.upper[-1] == pytest.approx((1 + 2 * tau ** 2) ** depth)
        assert monte_carlo_norm_ratio(depth, tau, 16, 400, False, rng) == pytest.approx(pred.upper[-1], rel=0.2)


def test_relu_norm_growth_monte_carlo_lies_between_the_bounds():
    rng = np.random.default_rng(12)
    for depth, tau in ((10, 0.3), (12, 12 ** -0.25), (6, 1.0)):
        pred = T.predicted_norm_growth(depth, tau)
        mc = monte_carlo_norm_ratio(depth, tau, 16, 300, True, rng)
        assert pred.lower[-1] * 0.9 <= mc <= pred.upper[-1] * 1.1
        assert mc < pred.upper[-1] * 0.95  # the ReLU really loses norm against the linear case


def test_norm_growth_validation():
    with pytest.raises(ValueError, match="tau"):
        T.predicted_norm_growth(10, -0.1)
    with pytest.raises(ValueError, match="depth"):
        T.predicted_norm_growth(-1, 0.1)
    with pytest.raises(ValueError, match="activation"):
        T.predicted_norm_growth(10, 0.1, activation="tanh")


# --------------------------------------------------------------------------- Cutting the Skip


def test_softmax_condition_matches_numpy():
    rng = np.random.default_rng(13)
    for n, s, temp in ((10, 0.05, 1.0), (10, 3.0, 1.0), (6, 1.0, 0.5), (16, 0.3, 2.0)):
        M = rng.normal(scale=s, size=(n, n))
        e = np.exp(M / temp)
        S = e / e.sum(axis=1, keepdims=True)
        assert T.softmax_condition(M, temp) == pytest.approx(np.linalg.cond(S), rel=1e-6)
        np.testing.assert_allclose(T.softmax(M, temp), S, rtol=1e-12)


def test_paper_simulation_diagonal_dominance_vs_diffuse_orders_of_magnitude():
    """App. A.2.1: n = d = 10, alpha = 0.1; beta = 5 gives kappa ~ 1.1, beta = 0 about 730."""
    for tokens in ("gaussian", "identity"):
        peak = T.mimetic_attention_condition(10, 10, 0.1, 5.0, np.random.default_rng(14), tokens=tokens, trials=31)
        diffuse = T.mimetic_attention_condition(10, 10, 0.1, 0.0, np.random.default_rng(15), tokens=tokens, trials=31)
        assert 1.0 <= peak < 2.0
        assert 100.0 <= diffuse <= 1e4  # same order of magnitude as the paper's 730
    one = T.mimetic_attention_condition(10, 10, 0.1, 5.0, np.random.default_rng(16), tokens="identity")
    assert one < 1.2


def test_mimetic_sampler_follows_eq_11_and_eqs_18_20():
    rng = np.random.default_rng(19)
    d, alpha, beta = 12, 0.8, 0.3
    Ms = np.array([T.sample_mimetic_logits(2, d, alpha, beta, rng) for _ in range(3000)])
    st = T.mimetic_logit_statistics(d, alpha, beta)
    diag, off = Ms[:, 0, 0], Ms[:, 0, 1]
    assert diag.mean() == pytest.approx(st.diag_mean, abs=0.15)
    assert diag.var() == pytest.approx(st.diag_var, rel=0.1)
    assert off.var() == pytest.approx(st.offdiag_var, rel=0.1)
    Zs = np.array([T.sample_mimetic_logits(d, d, alpha, beta, rng, tokens="identity") for _ in range(50)])
    np.testing.assert_allclose(Zs.mean(axis=0).diagonal(), beta, atol=0.1)
    off_id = (Zs - beta * np.eye(d))[:, ~np.eye(d, dtype=bool)]
    assert off_id.var() == pytest.approx(alpha ** 2 / d, rel=0.1)  # Z_ij ~ N(0, 1/d)


def test_softmax_condition_bounds_of_proposition_1_hold():
    rng = np.random.default_rng(17)
    for _ in range(30):
        n = int(rng.integers(2, 12))
        M = rng.normal(scale=float(rng.choice([0.01, 0.1, 1.0])), size=(n, n))
        M += float(rng.choice([0.0, 3.0, 8.0])) * np.eye(n)
        temp = float(rng.choice([0.5, 1.0, 2.0]))
        b = T.softmax_condition_bounds(M, temp)
        k = T.softmax_condition(M, temp)
        assert b.diffuse_lower <= k * (1 + 1e-9)
        assert k <= b.dominant_upper * (1 + 1e-9)
    M = 0.01 * rng.normal(size=(10, 10))
    assert T.softmax_condition_bounds(M).diffuse_lower > 10  # diffuse rows => ill-conditioned
    assert T.softmax_condition_bounds(8 * np.eye(10)).dominant_upper < 1.02


def test_mimetic_logit_statistics_match_monte_carlo():
    rng = np.random.default_rng(18)
    d, alpha, beta, N = 12, 0.7, 0.4, 20_000
    x = rng.normal(size=(N, d))
    y = rng.normal(size=(N, d))
    Z = rng.normal(scale=1 / math.sqrt(d), size=(N, d, d))
    Wx = alpha * np.einsum("nab,nb->na", Z, x)
    Wy = alpha * np.einsum("nab,nb->na", Z, y)
    c_ii = np.sum(x * Wx, axis=1) + beta * np.sum(x * x, axis=1)
    c_ij = np.sum(x * Wy, axis=1) + beta * np.sum(x * y, axis=1)
    st = T.mimetic_logit_statistics(d, alpha, beta)
    assert c_ii.mean() == pytest.approx(st.diag_mean, abs=0.1)
    assert c_ii.var() == pytest.approx(st.diag_var, rel=0.05)
    assert c_ij.mean() == pytest.approx(st.offdiag_mean, abs=0.1)
    assert c_ij.var() == pytest.approx(st.offdiag_var, rel=0.05)
    assert (c_ii - c_ij).var() == pytest.approx(st.gap_var, rel=0.05)
    assert (c_ii - c_ij).mean() == pytest.approx(st.gap_mean, abs=0.1)
    printed = T.mimetic_logit_statistics(d, alpha, beta, as_printed=True)
    assert printed.diag_var == st.diag_var
    assert printed.offdiag_var == pytest.approx(alpha ** 2 + beta ** 2 * d)  # Eq. 19 as printed
    assert printed.gap_var == pytest.approx(alpha ** 2 * (d + 3) + 3 * beta ** 2 * d)  # Eq. 20
    assert T.mimetic_logit_statistics(d, 0.0, beta, as_printed=True) == T.mimetic_logit_statistics(d, 0.0, beta)


def test_cutting_the_skip_validation():
    with pytest.raises(ValueError, match="tokens='identity' needs n == d"):
        T.sample_mimetic_logits(5, 10, 0.1, 1.0, 0, tokens="identity")
    with pytest.raises(ValueError, match="tokens"):
        T.sample_mimetic_logits(5, 10, 0.1, 1.0, 0, tokens="orthogonal")
    with pytest.raises(ValueError, match="logits"):
        T.softmax_condition(np.ones((3, 4)))
    with pytest.raises(ValueError, match="temperature"):
        T.softmax_condition(np.eye(3), temperature=0.0)
    with pytest.raises(ValueError, match="alpha"):
        T.mimetic_logit_statistics(8, -1.0, 0.0)
