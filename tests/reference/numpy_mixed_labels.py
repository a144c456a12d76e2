"""Independent NumPy float64 reference for the inverse reweighting of mixed-label batches.

Spec: /work/shared/specs/PIPELINES.md §4 ("Plugging the reweighting in", the project's definition
for mixed labels) on top of /work/shared/specs/REWEIGHT.md ("Inverse problem and closed form", "Two
levels"). Written from the formulas with plain loops in float64; the closed-form weights w* and the
macro factor β come from the float64 reference `numpy_reweight` (not from the library).

Row i of a batch has labels a_i, b_i, per-example losses ℓ_i^a, ℓ_i^b (against a_i and b_i) and the
batch's mixing weight λ (one scalar per batch):

    m_c  = Σ_i (λ·1[a_i = c] + (1 − λ)·1[b_i = c])
    T_c  = Σ_i (λ·1[a_i = c]·ℓ_i^a + (1 − λ)·1[b_i = c]·ℓ_i^b)
    L_c  = T_c / m_c                         present_c ⇔ m_c > 0
    L̄    = mean of L_c over the present classes
    w*_c = (L̄·L_c + α·w⁰_c) / (L_c² + α + ε)  (present), w⁰_c (absent)
    ŵ_c  = clip(β_c·w*_c, 0, max_weight)
    loss = (1/B) Σ_i (λ·ŵ_{a_i}·ℓ_i^a + (1 − λ)·ŵ_{b_i}·ℓ_i^b)

Conventions (the spec is silent; the same as the unmixed reference's): `where` = False rows are
padding and count nowhere, B counts the real rows (loss 0 when there is none). A label outside
[0, K) of a real row is left out of every class sum (never a clipped class) and makes the loss NaN.
"""

import numpy as np

from tests.reference import numpy_reweight as ref


def _f64(x):
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _real_rows(where, batch):
    if where is None:
        return np.ones(batch, dtype=bool)
    return np.asarray(where, dtype=bool).reshape(batch)


def _parts(labels_a, labels_b, lam, num_classes, where):
    """The (row, label, weight, which) parts of the batch that enter the class sums."""
    a = np.asarray(labels_a).astype(np.int64).reshape(-1)
    b = np.asarray(labels_b).astype(np.int64).reshape(-1)
    real = _real_rows(where, a.shape[0])
    lam = float(lam)
    parts = []
    for i in range(a.shape[0]):
        if not real[i]:
            continue
        for label, weight, which in ((a[i], lam, "a"), (b[i], 1.0 - lam, "b")):
            if 0 <= label < num_classes and weight > 0:
                parts.append((i, int(label), weight, which))
    return parts


def mixed_class_losses(loss_a, loss_b, labels_a, labels_b, lam, num_classes, where=None):
    """(L [K], present bool [K], m [K], T [K]) of a mixed-label batch (PIPELINES §4)."""
    losses = {"a": _f64(loss_a), "b": _f64(loss_b)}
    K = int(num_classes)
    mass = np.zeros(K)
    total = np.zeros(K)
    for i, label, weight, which in _parts(labels_a, labels_b, lam, K, where):
        mass[label] += weight
        total[label] += weight * losses[which][i]
    present = mass > 0
    class_losses = np.zeros(K)
    for c in range(K):
        if present[c]:
            class_losses[c] = total[c] / mass[c]
    return class_losses, present, mass, total


def _any_bad_label(labels_a, labels_b, num_classes, where):
    a = np.asarray(labels_a).reshape(-1)
    b = np.asarray(labels_b).reshape(-1)
    real = _real_rows(where, a.shape[0])
    bad = (a < 0) | (a >= num_classes) | (b < 0) | (b >= num_classes)
    return bool(np.any(bad & real))


def _clipped(values, max_weight):
    upper = np.inf if max_weight is None else float(max_weight)
    return np.clip(values, 0.0, upper)


def mixed_reweighted_loss_value(loss_a, loss_b, labels_a, labels_b, lam, num_classes, beta, prior,
                                alpha=0.0, max_weight=10.0, eps=1e-8, where=None):
    """Forward value: returns (loss, ŵ [K], w* [K], L [K], present [K], m [K]).

    `beta` is the β that enters the loss (all ones for macro = False). The value is the same in both
    gradient modes.
    """
    K = int(num_classes)
    L, present, mass, _ = mixed_class_losses(loss_a, loss_b, labels_a, labels_b, lam, K, where)
    w_star = ref.inverse_weights(L, present, prior, alpha=alpha, eps=eps)
    w_hat = _clipped(_f64(beta) * w_star, max_weight)
    la, lb = _f64(loss_a), _f64(loss_b)
    a = np.asarray(labels_a).astype(np.int64).reshape(-1)
    b = np.asarray(labels_b).astype(np.int64).reshape(-1)
    real = _real_rows(where, a.shape[0])
    lam = float(lam)
    rows = int(real.sum())
    if _any_bad_label(a, b, K, where):
        return np.nan, w_hat, w_star, L, present, mass
    if rows == 0:
        return 0.0, w_hat, w_star, L, present, mass
    total = 0.0
    for i in range(a.shape[0]):
        if not real[i]:
            continue
        if lam > 0:
            total += lam * w_hat[a[i]] * la[i]
        if 1.0 - lam > 0:
            total += (1.0 - lam) * w_hat[b[i]] * lb[i]
    return total / rows, w_hat, w_star, L, present, mass


def mixed_reweighted_loss_grad(loss_a, loss_b, labels_a, labels_b, lam, num_classes, beta, prior,
                               alpha=0.0, max_weight=10.0, eps=1e-8, where=None,
                               stop_gradient=False):
    """(∂loss/∂ℓ^a [B], ∂loss/∂ℓ^b [B]), analytic, for a batch without bad labels.

    With T_c = m_c·L_c the loss is (1/B) Σ_c ŵ_c·T_c, so for a counted part (row i, c its label,
    weight u = λ or 1 − λ):

        ∂loss/∂ℓ_i = (1/B)·u·ŵ_c                                     (stop_gradient)
        ∂loss/∂ℓ_i = (1/B)·(u·ŵ_c + G_c·u/m_c),  G_k = Σ_j T_j·∂ŵ_j/∂L_k (gradient flow)

    ∂ŵ_j/∂L_k = β_j·∂w*_j/∂L_k where the clip is inactive (0 < β_j·w*_j < max_weight), else 0;
    for present j, k with D_j = L_j² + α + ε, N_j = L̄·L_j + α·w⁰_j and P present classes:

        ∂w*_j/∂L_k = (L_j/P + L̄·δ_jk)/D_j − N_j·2·L_j·δ_jk/D_j².
    """
    K = int(num_classes)
    la, lb = _f64(loss_a), _f64(loss_b)
    batch = la.shape[0]
    beta = _f64(beta)
    w0 = _f64(prior)
    L, present, mass, total = mixed_class_losses(la, lb, labels_a, labels_b, lam, K, where)
    w_star = ref.inverse_weights(L, present, w0, alpha=alpha, eps=eps)
    w_hat = _clipped(beta * w_star, max_weight)
    rows = int(_real_rows(where, batch).sum())
    grads = {"a": np.zeros(batch), "b": np.zeros(batch)}
    if rows == 0:
        return grads["a"], grads["b"]

    G = np.zeros(K)
    if not stop_gradient and present.any():
        P = int(present.sum())
        L_bar = float(np.mean(L[present]))
        upper = np.inf if max_weight is None else float(max_weight)
        for j in range(K):
            if not present[j] or not 0.0 < beta[j] * w_star[j] < upper:
                continue
            D = L[j] ** 2 + alpha + eps
            N = L_bar * L[j] + alpha * w0[j]
            for k in range(K):
                if not present[k]:
                    continue
                d_w = L[j] / P / D
                if j == k:
                    d_w += L_bar / D - N * 2.0 * L[j] / D ** 2
                G[k] += total[j] * beta[j] * d_w

    for i, label, weight, which in _parts(labels_a, labels_b, lam, K, where):
        grads[which][i] = (weight * w_hat[label] + G[label] * weight / mass[label]) / rows
    return grads["a"], grads["b"]


def mixed_reweight_step(loss_a, loss_b, labels_a, labels_b, lam, batch_counts, state_beta, prior,
                        alpha=0.0, gamma=1.0, max_weight=10.0, macro=True, refresh_macro=True,
                        stop_gradient=False, eps=1e-8, where=None):
    """One step with the state (B_c, β) carried, in the order of REWEIGHT.md / the library:

        1. if refresh_macro: β ← macro_factor(B, γ) from the counts before this batch;
        2. ŵ from this batch's L_c (β ≡ 1 in the loss when macro = False);
        3. loss and its gradients;
        4. B_c += 1 for every present class (m_c > 0): one counter update per step.

    Returns a dict: loss, grad_a, grad_b, batch_counts, beta (new state), class_weights (ŵ),
    inverse_weights (w*), class_losses (L), present, mass (m).
    """
    K = _f64(batch_counts).shape[0]
    beta = ref.macro_factor(batch_counts, gamma) if refresh_macro else _f64(state_beta)
    loss_beta = beta if macro else np.ones(K)
    args = (loss_a, loss_b, labels_a, labels_b, lam, K, loss_beta, prior)
    kwargs = dict(alpha=alpha, max_weight=max_weight, eps=eps, where=where)
    loss, w_hat, w_star, L, present, mass = mixed_reweighted_loss_value(*args, **kwargs)
    grad_a, grad_b = mixed_reweighted_loss_grad(*args, **kwargs, stop_gradient=stop_gradient)
    return dict(loss=loss, grad_a=grad_a, grad_b=grad_b,
                batch_counts=_f64(batch_counts) + present, beta=beta, class_weights=w_hat,
                inverse_weights=w_star, class_losses=L, present=present, mass=mass)


def soft_label_reweighted_ce(logits, labels_a, labels_b, lam, class_weights):
    """GLMC's L_reb (PIPELINES §3): (1/B) Σ_i ce(z_i, y^w_i), y^w_i = λ·v_{a_i}·e_{a_i} +
    (1 − λ)·v_{b_i}·e_{b_i}, ce(z, y) = −Σ_k y_k log softmax(z)_k."""
    z = np.asarray(logits, dtype=np.float64)
    v = _f64(class_weights)
    lam = float(lam)
    total = 0.0
    for i in range(z.shape[0]):
        log_p = z[i] - np.max(z[i])
        log_p = log_p - np.log(np.sum(np.exp(log_p)))
        target = np.zeros(z.shape[1])
        target[int(labels_a[i])] += lam * v[int(labels_a[i])]
        target[int(labels_b[i])] += (1.0 - lam) * v[int(labels_b[i])]
        total += -np.sum(target * log_p)
    return total / z.shape[0]


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    K, B = 6, 24
    a = rng.integers(0, K - 1, B)            # class K − 1 absent
    b = a[rng.permutation(B)]
    la, lb = rng.uniform(0.2, 3.0, B), rng.uniform(0.2, 3.0, B)
    ones = np.ones(K)

    # λ = 1 is the unmixed reference; b = a and ℓ^b = ℓ^a too, for any λ.
    for lam, labels_b, loss_b in ((1.0, b, lb), (0.3, a, la)):
        mixed = mixed_reweighted_loss_value(la, loss_b, a, labels_b, lam, K, ones, ones)[0]
        plain = ref.inverse_reweighted_loss_value(la, a, K, ones, ones)[0]
        assert np.isclose(mixed, plain, rtol=1e-12), (lam, mixed, plain)

    # α = 0, no clip, β ≡ 1: loss = L̄; with β: L̄·S/B, S = Σ_c m_c β_c.
    lam = 0.35
    L, present, mass, _ = mixed_class_losses(la, lb, a, b, lam, K)
    loss = mixed_reweighted_loss_value(la, lb, a, b, lam, K, ones, ones, max_weight=None)[0]
    assert np.isclose(loss, L[present].mean(), rtol=1e-7)
    beta = ref.macro_factor(np.array([3, 7, 1, 2, 0, 4]))
    loss = mixed_reweighted_loss_value(la, lb, a, b, lam, K, beta, ones, max_weight=None)[0]
    assert np.isclose(loss, L[present].mean() * np.sum(mass * beta) / B, rtol=1e-7)

    # The analytic gradients agree with central differences (both modes, α > 0, clip active).
    prior = ref.class_prior(np.array([900, 300, 120, 40, 12, 5]), "inv_freq")
    for stop_gradient in (False, True):
        kwargs = dict(alpha=0.4, max_weight=1.6)
        ga, gb = mixed_reweighted_loss_grad(la, lb, a, b, lam, K, beta, prior, **kwargs,
                                            stop_gradient=stop_gradient)
        if stop_gradient:
            _, w_hat, *_ = mixed_reweighted_loss_value(la, lb, a, b, lam, K, beta, prior, **kwargs)
            assert np.allclose(ga, lam * w_hat[a] / B) and np.allclose(gb, (1 - lam) * w_hat[b] / B)
            continue
        for which, grad in (("a", ga), ("b", gb)):
            for i in range(B):
                h = 1e-6
                up = {"a": la.copy(), "b": lb.copy()}
                down = {"a": la.copy(), "b": lb.copy()}
                up[which][i] += h
                down[which][i] -= h
                f = lambda l: mixed_reweighted_loss_value(l["a"], l["b"], a, b, lam, K, beta, prior,
                                                          **kwargs)[0]
                assert np.isclose((f(up) - f(down)) / (2 * h), grad[i], rtol=1e-6, atol=1e-9)

    # ŵ = v (α → ∞ with prior v, no macro, no clip) is GLMC's soft-label reweighted CE.
    z = 2.0 * rng.normal(size=(B, K))
    ce = lambda y: np.array([np.log(np.sum(np.exp(z[i]))) - z[i, y[i]] for i in range(B)])
    v = ref.class_prior(np.array([900, 300, 120, 40, 12, 5]), "inv_freq")
    loss = mixed_reweighted_loss_value(ce(a), ce(b), a, b, lam, K, ones, v, alpha=1e15,
                                       max_weight=None)[0]
    assert np.isclose(loss, soft_label_reweighted_ce(z, a, b, lam, v), rtol=1e-9)
    print("numpy_mixed_labels self-check passed")
