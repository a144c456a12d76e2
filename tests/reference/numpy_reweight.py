"""Independent NumPy float64 reference for inverse-view loss reweighting, baselines and NC metrics.

Spec: /work/shared/specs/REWEIGHT.md (Wang et al., "Rethinking Loss Reweighting for Imbalance Learning as
an Inverse Problem: A Neural Collapse Point of View", arXiv 2605.10047). Written from the spec's formulas
(and, for the baselines, the cited papers' published forms) without looking at the JAX implementation.
Plain loops, float64 throughout.

Shapes: B examples, d feature dimensions, K classes.
  logits z : [B, K]    labels y : int [B]    features h : [B, d]    W : [K, d]    counts n : [K]
All functions return values only (no gradients); stop-gradient vs. reference-gradient variants of the
reweighted loss have the same forward value.
"""

import numpy as np
from scipy.special import logsumexp


def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _labels(labels):
    return np.asarray(labels).astype(np.int64).reshape(-1)


def _valid_mask(where, batch_size):
    if where is None:
        return np.ones(batch_size, dtype=bool)
    return np.asarray(where, dtype=bool).reshape(batch_size)


def _per_example_ce(logits, labels):
    """CE_i = logsumexp(z_i) − z_{i,y_i}, stable."""
    z = _f64(logits)
    y = _labels(labels)
    out = np.zeros(z.shape[0], dtype=np.float64)
    for i in range(z.shape[0]):
        out[i] = logsumexp(z[i]) - z[i, y[i]]
    return out


def _normalise_mean_one(w):
    w = _f64(w)
    return w / np.mean(w)


# ----------------------------------------------------------------------------------------------------
# Inverse-view reweighting (spec sections "Inverse problem and closed form", "Two levels")
# ----------------------------------------------------------------------------------------------------

def class_prior(counts, kind):
    """Prior weights w⁰, normalised to mean 1 over the K classes.

        'uniform'       : w⁰_c ∝ 1
        'inv_freq'      : w⁰_c ∝ 1 / n_c
        'inv_sqrt_freq' : w⁰_c ∝ 1 / sqrt(n_c)
        then w⁰ ← w⁰ / mean_c w⁰_c.

    Requires n_c > 0 for the frequency-based kinds. Spec: "Inverse problem and closed form".
    """
    n = _f64(counts).reshape(-1)
    if kind == "uniform":
        w = np.ones_like(n)
    elif kind == "inv_freq":
        w = 1.0 / n
    elif kind == "inv_sqrt_freq":
        w = 1.0 / np.sqrt(n)
    else:
        raise ValueError(f"unknown prior kind {kind!r}")
    return _normalise_mean_one(w)


def batch_class_losses(per_example_loss, labels, num_classes, where=None):
    """Per-class mean loss in the batch.

        n_c = #{i valid : y_i = c},   present_c = n_c > 0,
        L_c = (1/n_c) Σ_{i valid, y_i = c} ℓ_i   if present, else 0.

    Spec: "Inverse problem and closed form" (per-step reference behaviour).
    Returns (L [K], present bool [K], n int64 [K]).
    """
    loss = _f64(per_example_loss).reshape(-1)
    y = _labels(labels)
    valid = _valid_mask(where, y.shape[0])
    K = int(num_classes)
    L = np.zeros(K, dtype=np.float64)
    n = np.zeros(K, dtype=np.int64)
    for c in range(K):
        members = (y == c) & valid
        n[c] = int(members.sum())
        if n[c] > 0:
            L[c] = float(np.mean(loss[members]))
    return L, n > 0, n


def inverse_weights(class_losses, present, prior, alpha=0.0, eps=1e-8):
    """Batch-level closed-form weights w*.

        L̄   = mean of L_c over present classes (a class-level mean)
        w*_c = (L̄·L_c + α·w⁰_c) / (L_c² + α + ε)    for present c
        w*_c = w⁰_c                                  for absent c
    α = 0 gives w*_c = L̄ / L_c (up to ε).

    Convention: if no class is present, w* = w⁰.
    Spec: "Inverse problem and closed form". Returns [K].
    """
    L = _f64(class_losses).reshape(-1)
    present = np.asarray(present, dtype=bool).reshape(-1)
    w0 = _f64(prior).reshape(-1)
    alpha = float(alpha)
    eps = float(eps)
    w = w0.copy()
    if not present.any():
        return w
    L_bar = float(np.mean(L[present]))
    for c in range(L.shape[0]):
        if present[c]:
            w[c] = (L_bar * L[c] + alpha * w0[c]) / (L[c] ** 2 + alpha + eps)
    return w


def macro_factor(batch_counts, gamma=1.0):
    """Macro-level factor from the number of batches B_c that contained class c.

        β_c = max(B_c, 1)^(−γ),   then β ← β / mean_c β_c   (mean 1 over all K classes).

    Spec: "Two levels" (macro level). Returns [K].
    """
    Bc = _f64(batch_counts).reshape(-1)
    beta = np.maximum(Bc, 1.0) ** (-float(gamma))
    return _normalise_mean_one(beta)


def inverse_reweighted_loss_value(per_example_loss, labels, num_classes, beta, prior, alpha=0.0,
                                  max_weight=10.0, eps=1e-8, where=None):
    """Forward value of the inverse-view reweighted loss.

        (L, present, n) = batch_class_losses(ℓ, y, K, where)
        w*  = inverse_weights(L, present, w⁰, α, ε)
        ŵ_c = clip(β_c · w*_c, 0, max_weight)
        loss = (1/B) Σ_{i valid} ŵ_{y_i} ℓ_i,    B = number of valid examples (loss = 0 if B = 0)

    Identity (α = 0, β ≡ 1, clamp inactive): loss = L̄ up to ε; with β: loss = L̄·S/B, S = Σ_c n_c β_c.
    The value is the same whether or not gradients flow through w (the spec's two variants).
    Spec: "Inverse problem and closed form", "Two levels". Returns (loss, w_hat [K]).
    """
    loss_i = _f64(per_example_loss).reshape(-1)
    y = _labels(labels)
    valid = _valid_mask(where, y.shape[0])
    L, present, _ = batch_class_losses(loss_i, y, num_classes, where=valid)
    w_star = inverse_weights(L, present, prior, alpha=alpha, eps=eps)
    w_hat = np.clip(_f64(beta).reshape(-1) * w_star, 0.0, float(max_weight))
    n_valid = int(valid.sum())
    if n_valid == 0:
        return 0.0, w_hat
    total = 0.0
    for i in range(y.shape[0]):
        if valid[i]:
            total += w_hat[y[i]] * loss_i[i]
    return total / n_valid, w_hat


# ----------------------------------------------------------------------------------------------------
# Common baselines (spec section "Common baselines (canonical defaults)")
# ----------------------------------------------------------------------------------------------------

def inverse_frequency_weights(counts):
    """w_c ∝ 1/n_c, normalised to mean 1 over classes (requires n_c > 0). Spec: "Common baselines"."""
    return _normalise_mean_one(1.0 / _f64(counts).reshape(-1))


def class_balanced_weights(counts, beta=0.9999):
    """Class-balanced (effective number, Cui et al. CVPR 2019) weights.

        w_c ∝ (1 − β) / (1 − β^{n_c}),   normalised to mean 1 over classes (requires n_c > 0).

    (Mean 1 is the same as the LDAM-DRW code's "sum to K".) Spec: "Common baselines".
    """
    n = _f64(counts).reshape(-1)
    beta = float(beta)
    w = (1.0 - beta) / (1.0 - beta ** n)
    return _normalise_mean_one(w)


def focal_loss(logits, labels, gamma=2.0):
    """Focal loss (Lin et al. 2017), per example, softmax form.

        CE_i = −log p_{i,y_i},  p_i = softmax(z_i);   FL_i = (1 − p_{i,y_i})^γ · CE_i

    with p_{i,y_i} = exp(−CE_i). Spec: "Common baselines". Returns [B].
    """
    ce = _per_example_ce(logits, labels)
    p_true = np.exp(-ce)
    return (1.0 - p_true) ** float(gamma) * ce


def ldam_loss(logits, labels, counts, max_margin=0.5, scale=30.0, weights=None):
    """LDAM loss (Cao et al., NeurIPS 2019), per example.

        Δ_c = C / n_c^{1/4},  C such that max_c Δ_c = max_margin  (i.e. C = max_margin · min_c n_c^{1/4})
        z'_{i,c} = z_{i,c} − Δ_{y_i}·[c = y_i]
        LDAM_i = weights[y_i] · ( logsumexp(s·z'_i) − s·z'_{i,y_i} )      (weights[y] = 1 if None)

    Note: this returns the per-example weighted CE. PyTorch's F.cross_entropy(weight=...) with mean
    reduction divides the batch sum by Σ_i weights[y_i], not by B; a batch reduction is the caller's
    choice. Spec: "Common baselines". Returns [B].
    """
    z = _f64(logits)
    y = _labels(labels)
    n = _f64(counts).reshape(-1)
    raw = 1.0 / n ** 0.25
    delta = raw * (float(max_margin) / np.max(raw))
    s = float(scale)
    out = np.zeros(z.shape[0], dtype=np.float64)
    for i in range(z.shape[0]):
        zi = z[i].copy()
        zi[y[i]] -= delta[y[i]]
        zi = s * zi
        out[i] = logsumexp(zi) - zi[y[i]]
        if weights is not None:
            out[i] *= float(_f64(weights).reshape(-1)[y[i]])
    return out


def logit_adjusted_loss(logits, labels, counts, tau=1.0):
    """Logit-adjusted loss (Menon et al., ICLR 2021), per example.

        π_c = n_c / Σ_j n_j;   LA_i = CE(z_i + τ·log π, y_i)

    Spec: "Common baselines". Returns [B].
    """
    z = _f64(logits)
    n = _f64(counts).reshape(-1)
    prior = n / np.sum(n)
    return _per_example_ce(z + float(tau) * np.log(prior)[None, :], labels)


def balanced_softmax_loss(logits, labels, counts):
    """Balanced Softmax (Ren et al., NeurIPS 2020) = logit adjustment with τ = 1:
    CE(z_i + log π, y_i). Spec: "Common baselines". Returns [B]."""
    return logit_adjusted_loss(logits, labels, counts, tau=1.0)


def ib_loss(logits, labels, features, counts, alpha=1000.0, eps=1e-3):
    """Influence-balanced loss (Park, Lim, Jung, Kim, "Influence-Balanced Loss for Imbalanced Visual
    Classification", ICCV 2021, arXiv 2110.02444), per example, in the published code's form
    (github.com/pseulki/IB-Loss, losses.py `IBLoss` with train_rule 'IBReweight' in cifar_train.py):

        p_i   = softmax(z_i),  e_{y_i} = one-hot(y_i)
        g_i   = ‖p_i − e_{y_i}‖₁                     (L1 norm of dCE/dz)
        f_i   = ‖h_i‖₁                               (L1 norm of the penultimate features h_i, i.e. the
                                                      classifier's input)
        w_c   = (1/n_c) / Σ_j (1/n_j) · K            (inverse frequency, sums to K = mean 1)
        IB_i  = w_{y_i} · CE_i · α / (g_i · f_i + ε)

    The published batch loss is the plain mean over the batch of IB_i (torch `.mean()` of
    F.cross_entropy(reduction='none', weight=w) · ib). Defaults α = 1000 (as used in the CIFAR script),
    ε = 1e-3. Spec: "Common baselines". Returns [B].
    """
    z = _f64(logits)
    y = _labels(labels)
    h = _f64(features)
    K = z.shape[1]
    w = inverse_frequency_weights(counts)
    ce = _per_example_ce(z, y)
    out = np.zeros(z.shape[0], dtype=np.float64)
    for i in range(z.shape[0]):
        p = np.exp(z[i] - logsumexp(z[i]))
        onehot = np.zeros(K, dtype=np.float64)
        onehot[y[i]] = 1.0
        g = np.sum(np.abs(p - onehot))
        f = np.sum(np.abs(h[i]))
        out[i] = w[y[i]] * ce[i] * float(alpha) / (g * f + float(eps))
    return out


# ----------------------------------------------------------------------------------------------------
# Neural Collapse metrics (spec section "NC metrics") and ρ (section "Loss imbalance coefficient ρ")
# ----------------------------------------------------------------------------------------------------

def _nc2_value(gram):
    """‖G/‖G‖_F − (I_K − 11ᵀ/K)/√(K−1)‖_F."""
    K = gram.shape[0]
    target = (np.eye(K) - np.ones((K, K)) / K) / np.sqrt(K - 1.0)
    return float(np.linalg.norm(gram / np.linalg.norm(gram, "fro") - target, "fro"))


def nc_metrics(features, labels, W, num_classes, rcond=1e-15, centring="sample"):
    """Neural Collapse metrics NC1–NC4 (Papyan, Han, Donoho, PNAS 2020; Zhu et al., NeurIPS 2021).

    With N samples h_i ∈ R^d, class means μ_c = mean_{y_i=c} h_i, global mean μ_G = (1/N) Σ_i h_i (the
    sample mean, not the mean of class means), M = [μ_1 − μ_G, ..., μ_K − μ_G] ∈ R^{d×K}, W ∈ R^{K×d}:
        Σ_W = (1/N) Σ_i (h_i − μ_{y_i})(h_i − μ_{y_i})ᵀ
        Σ_B = (1/K) Σ_c (μ_c − μ_G)(μ_c − μ_G)ᵀ
        NC1   = Tr(Σ_W Σ_B⁺) / K                  (Σ_B⁺ = np.linalg.pinv(Σ_B, rcond=rcond))
        NC2   = ‖MᵀM/‖MᵀM‖_F − (I_K − 11ᵀ/K)/√(K−1)‖_F        (Gram of centred means, K×K)
        NC2_W = ‖WWᵀ/‖WWᵀ‖_F − (I_K − 11ᵀ/K)/√(K−1)‖_F
        NC3   = ‖W/‖W‖_F − Mᵀ/‖M‖_F‖_F²
        NC4   = (1/N) #{i : argmax_c (W h_i)_c ≠ argmin_c ‖h_i − μ_c‖₂}     (classifier without bias;
                ties resolve to the lowest class index, as np.argmax / np.argmin do)

    Convention: every one of the K classes must have at least one sample (a ValueError otherwise); the
    formulas then use all K classes. rcond = 1e-15 is NumPy's default relative cutoff; note that
    jnp.linalg.pinv's default cutoff differs (max(M, N)·eps), which matters only when Σ_B is
    ill-conditioned. Spec: "NC metrics". Returns dict with keys nc1, nc2, nc2_w, nc3, nc4.

    centring="class_balanced" replaces μ_G by the unweighted mean of the class means,
    μ_G = (1/K) Σ_c μ_c (issue "the papers' schedule over three seeds": the imbalanced
    Neural-Collapse reading, in which an exact simplex ETF scores NC2 = 0 at any class counts).
    """
    h = _f64(features)
    y = _labels(labels)
    W = _f64(W)
    K = int(num_classes)
    N, d = h.shape
    mu = np.zeros((K, d), dtype=np.float64)
    for c in range(K):
        members = y == c
        if not members.any():
            raise ValueError(f"class {c} has no sample; nc_metrics needs all K classes present")
        mu[c] = h[members].mean(axis=0)
    if centring == "sample":
        mu_G = h.mean(axis=0)
    elif centring == "class_balanced":
        mu_G = mu.mean(axis=0)
    else:
        raise ValueError(centring)

    sigma_W = np.zeros((d, d), dtype=np.float64)
    for i in range(N):
        diff = h[i] - mu[y[i]]
        sigma_W += np.outer(diff, diff)
    sigma_W /= N

    sigma_B = np.zeros((d, d), dtype=np.float64)
    for c in range(K):
        diff = mu[c] - mu_G
        sigma_B += np.outer(diff, diff)
    sigma_B /= K

    nc1 = float(np.trace(sigma_W @ np.linalg.pinv(sigma_B, rcond=rcond)) / K)

    M = (mu - mu_G[None, :]).T  # d×K, columns are the centred means
    nc2 = _nc2_value(M.T @ M)
    nc2_w = _nc2_value(W @ W.T)
    nc3 = float(np.linalg.norm(W / np.linalg.norm(W, "fro") - M.T / np.linalg.norm(M, "fro"),
                               "fro") ** 2)

    mismatches = 0
    for i in range(N):
        pred_classifier = int(np.argmax(W @ h[i]))
        pred_ncc = int(np.argmin([np.linalg.norm(h[i] - mu[c]) for c in range(K)]))
        mismatches += int(pred_classifier != pred_ncc)
    nc4 = mismatches / N
    return {"nc1": nc1, "nc2": nc2, "nc2_w": nc2_w, "nc3": nc3, "nc4": nc4}


def rho(class_losses):
    """Loss imbalance coefficient (project definition, spec "Loss imbalance coefficient ρ"):

        ρ = std_c(L_c) / mean_c(L_c)      (population std, ddof = 0; coefficient of variation)

    over the per-class mean losses L_c (on the whole training set). 0 exactly when all L_c are equal.
    """
    L = _f64(class_losses).reshape(-1)
    return float(np.std(L, ddof=0) / np.mean(L))


# ----------------------------------------------------------------------------------------------------
# Self-check
# ----------------------------------------------------------------------------------------------------

if __name__ == "__main__":
    rng = np.random.default_rng(0)

    # --- Simplex ETF with aligned classifier: NC1..NC4 ≈ 0. ---
    K, d, per = 5, 8, 4
    Q, _ = np.linalg.qr(rng.normal(size=(d, K)))             # d×K orthonormal columns
    etf = np.sqrt(K / (K - 1.0)) * Q @ (np.eye(K) - np.ones((K, K)) / K)   # columns: ETF vertices
    means = 3.0 * etf.T                                        # K×d class means, centred
    y_etf = np.repeat(np.arange(K), per)
    h_etf = means[y_etf]                                       # no within-class variability
    W_etf = 0.7 * means                                        # classifier aligned with the means
    nc = nc_metrics(h_etf, y_etf, W_etf, K)
    assert all(abs(v) < 1e-10 for v in nc.values()), nc
    # Break collapse: all metrics become clearly positive (NC4 may stay 0 with little noise).
    h_noisy = h_etf + 2.0 * rng.normal(size=h_etf.shape)
    nc_n = nc_metrics(h_noisy, y_etf, rng.normal(size=(K, d)), K)
    assert nc_n["nc1"] > 1e-3 and nc_n["nc2_w"] > 1e-3 and nc_n["nc3"] > 1e-3
    # NC1 cross-check against the literal trace formula with a centred helper.
    mu = np.stack([h_noisy[y_etf == c].mean(0) for c in range(K)])
    Sw = sum(np.outer(h_noisy[i] - mu[y_etf[i]], h_noisy[i] - mu[y_etf[i]]) for i in range(K * per))
    Sw = Sw / (K * per)
    Mc = mu - h_noisy.mean(0)
    Sb = Mc.T @ Mc / K
    assert np.isclose(nc_n["nc1"], np.trace(Sw @ np.linalg.pinv(Sb)) / K)

    # --- Priors and baseline weights: mean 1. ---
    counts = np.array([500.0, 200.0, 50.0, 10.0, 5.0])
    for kind in ("uniform", "inv_freq", "inv_sqrt_freq"):
        assert np.isclose(class_prior(counts, kind).mean(), 1.0)
    assert np.allclose(class_prior(counts, "inv_freq"), inverse_frequency_weights(counts))
    cb = class_balanced_weights(counts)
    assert np.isclose(cb.mean(), 1.0) and np.all(np.diff(cb) > 0)
    assert np.isclose(macro_factor(np.array([0, 1, 4, 9, 100])).mean(), 1.0)
    assert np.allclose(macro_factor(np.array([0, 1, 2]), 1.0), np.array([1, 1, 0.5]) / (2.5 / 3))

    # --- Inverse weights: identity loss = L̄ (α = 0, β ≡ 1, no clamp), and L̄·S/B with β. ---
    B = 40
    y = rng.integers(0, K - 1, size=B)                        # class K-1 absent from the batch
    ell = rng.uniform(0.2, 3.0, size=B)
    L, present, n = batch_class_losses(ell, y, K)
    L_bar = L[present].mean()
    ones = np.ones(K)
    loss, w_hat = inverse_reweighted_loss_value(ell, y, K, ones, ones, alpha=0.0, max_weight=1e9)
    assert np.isclose(loss, L_bar, rtol=1e-6) and w_hat[K - 1] == 1.0
    beta = macro_factor(np.array([3, 7, 1, 2, 0]))
    loss_b, _ = inverse_reweighted_loss_value(ell, y, K, beta, ones, alpha=0.0, max_weight=1e9)
    assert np.isclose(loss_b, L_bar * np.sum(n * beta) / B, rtol=1e-6)
    # α → ∞ gives back the prior; clamp binds at max_weight.
    w_big = inverse_weights(L, present, class_prior(counts, "inv_freq"), alpha=1e12)
    assert np.allclose(w_big, class_prior(counts, "inv_freq"), rtol=1e-6)
    _, w_clamped = inverse_reweighted_loss_value(ell, y, K, 100.0 * ones, ones)
    assert w_clamped.max() == 10.0
    # Masked examples are ignored.
    mask = rng.random(B) < 0.7
    loss_m, _ = inverse_reweighted_loss_value(ell, y, K, ones, ones, max_weight=1e9, where=mask)
    Lm, pm, _ = batch_class_losses(ell[mask], y[mask], K)
    assert np.isclose(loss_m, Lm[pm].mean(), rtol=1e-6)

    # --- Baseline losses. ---
    z = rng.normal(size=(B, K)) * 2.0
    h = rng.normal(size=(B, d))
    ce = _per_example_ce(z, y)
    assert np.allclose(focal_loss(z, y, gamma=0.0), ce)
    balanced = np.full(K, 100.0)
    assert np.allclose(balanced_softmax_loss(z, y, balanced), ce)
    assert np.allclose(logit_adjusted_loss(z, y, balanced, tau=2.0), ce)
    # LDAM with equal counts: every margin is max_margin.
    z_m = z.copy()
    z_m[np.arange(B), y] -= 0.5
    assert np.allclose(ldam_loss(z, y, balanced), _per_example_ce(30.0 * z_m, y))
    assert np.allclose(ldam_loss(z, y, counts, weights=cb), cb[y] * ldam_loss(z, y, counts))
    ib = ib_loss(z, y, h, counts)
    p = np.exp(z - logsumexp(z, axis=1, keepdims=True))
    g = np.abs(p - np.eye(K)[y]).sum(1)
    assert np.allclose(ib, inverse_frequency_weights(counts)[y] * ce * 1000.0
                       / (g * np.abs(h).sum(1) + 1e-3))

    assert rho(np.full(K, 1.3)) == 0.0
    assert np.isclose(rho(np.array([1.0, 3.0])), 0.5)

    print("numpy_reweight self-check passed;", {k: f"{v:.2e}" for k, v in nc.items()})
