"""Independent NumPy float64 reference for MR2 (margin regularization), written from the spec alone.

Spec: /work/shared/specs/MR2.md (Zhu et al., "Reducing Class-Wise Performance Disparity via Margin
Regularization", ICLR 2026, arXiv 2602.00205). This module deliberately does NOT import or mirror the
JAX implementation; it favours plain loops over classes and pairs, in float64, for clarity.

Shapes used throughout: B examples, d feature dimensions, K classes.
  features / φ : [B, d]     logits / z : [B, K]     labels / y : int [B]
  where        : bool [B] (optional validity mask; None means every example is valid)
  A, V         : [K] float  (EMA statistics)         seen : bool [K]

Conventions chosen where the spec is silent are marked "Convention:" in the docstrings.
"""

import numpy as np
from scipy.special import logsumexp


# ----------------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------------

def _f64(x):
    return np.asarray(x, dtype=np.float64)


def _valid_mask(where, batch_size):
    if where is None:
        return np.ones(batch_size, dtype=bool)
    return np.asarray(where, dtype=bool).reshape(batch_size)


# ----------------------------------------------------------------------------------------------------
# Per-class statistics (spec section "Per-class statistics (carried as training state)")
# ----------------------------------------------------------------------------------------------------

def lp_sq_norm(x, p):
    """Squared L_p norm along the last axis.

        ‖x‖_p² = (Σ_j |x_j|^p)^(2/p)

    Spec: "Per-class statistics" (a_k = ‖μ̂_k‖_p², v_k = mean ‖φ_i − μ̂_k‖_p²). For p = 2 this is the plain
    sum of squares.
    """
    x = _f64(x)
    p = float(p)
    return np.sum(np.abs(x) ** p, axis=-1) ** (2.0 / p)


def batch_class_moments(features, labels, num_classes, p, where=None):
    """Batch class moments a_k, v_k and counts n_k.

    For every class k with at least one valid example (where_i True and y_i = k):
        m_k = (1/n_k) Σ_{i: y_i=k} φ_i                         (batch class mean)
        a_k = ‖m_k‖_p²
        v_k = (1/n_k) Σ_{i: y_i=k} ‖φ_i − m_k‖_p²               (mean, i.e. divide by n_k, not n_k − 1)
    Classes with n_k = 0 get a_k = v_k = 0.

    Spec: "Per-class statistics". (Under data parallelism the batch is the global batch; this reference
    always sees the whole batch at once, so it is the single-device ground truth.)

    Returns (a [K], v [K], counts int64 [K]).
    """
    phi = _f64(features)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    valid = _valid_mask(where, y.shape[0])
    K = int(num_classes)
    a = np.zeros(K, dtype=np.float64)
    v = np.zeros(K, dtype=np.float64)
    counts = np.zeros(K, dtype=np.int64)
    for k in range(K):
        members = np.nonzero((y == k) & valid)[0]
        counts[k] = members.size
        if members.size == 0:
            continue
        m_k = phi[members].mean(axis=0)
        a[k] = lp_sq_norm(m_k, p)
        v[k] = np.mean([lp_sq_norm(phi[i] - m_k, p) for i in members])
    return a, v, counts


def update_class_stats(A, V, seen, features, labels, decay, p, where=None):
    """EMA update of the per-class statistics with one (global) batch.

    For each class k present in the batch (n_k > 0 among valid examples), with a_k, v_k from
    `batch_class_moments`:
        if seen_k:  A_k ← decay·A_k + (1 − decay)·a_k,   V_k ← decay·V_k + (1 − decay)·v_k
        else:       A_k ← a_k,                           V_k ← v_k        (first time the class is seen)
        seen_k ← True
    Classes absent from the batch keep A_k, V_k, seen_k unchanged.

    Spec: "Per-class statistics". Inputs are not modified; new arrays are returned.
    Returns (A [K], V [K], seen bool [K]).
    """
    A = _f64(A).copy()
    V = _f64(V).copy()
    seen = np.asarray(seen, dtype=bool).copy()
    decay = float(decay)
    K = A.shape[0]
    a, v, counts = batch_class_moments(features, labels, K, p, where=where)
    for k in range(K):
        if counts[k] == 0:
            continue
        if seen[k]:
            A[k] = decay * A[k] + (1.0 - decay) * a[k]
            V[k] = decay * V[k] + (1.0 - decay) * v[k]
        else:
            A[k] = a[k]
            V[k] = v[k]
        seen[k] = True
    return A, V, seen


# ----------------------------------------------------------------------------------------------------
# Logit margin (spec section "Logit margin: class-dependent temperature cross-entropy")
# ----------------------------------------------------------------------------------------------------

def class_margins(A, V, seen, c_bar=1.0):
    """Per-class temperatures γ_k.

    Over the set S of seen classes (n_seen = |S|):
        γ_k = c̄ · n_seen · (A_k + V_k)^{1/3} / Σ_{j∈S} (A_j + V_j)^{1/3}      for k ∈ S
        γ_k = c̄                                                              for k ∉ S
    If no class is seen, or Σ_{j∈S} (A_j + V_j)^{1/3} = 0, every γ_k = c̄.
    Hence mean_{k∈S} γ_k = c̄ (the paper's constraint Σ_k γ_k = K·c̄ restricted to seen classes).

    Spec: "Logit margin" (normalise over the classes seen so far, not over all K with zeros).
    Convention: the cube root is taken of A_k + V_k, which is ≥ 0 by construction.
    """
    A = _f64(A)
    V = _f64(V)
    seen = np.asarray(seen, dtype=bool)
    c_bar = float(c_bar)
    K = A.shape[0]
    gamma = np.full(K, c_bar, dtype=np.float64)
    n_seen = int(seen.sum())
    if n_seen == 0:
        return gamma
    roots = np.zeros(K, dtype=np.float64)
    total = 0.0
    for k in range(K):
        if seen[k]:
            roots[k] = (A[k] + V[k]) ** (1.0 / 3.0)
            total += roots[k]
    if total == 0.0:
        return gamma
    for k in range(K):
        if seen[k]:
            gamma[k] = c_bar * n_seen * roots[k] / total
    return gamma


def margin_cross_entropy(logits, labels, gamma):
    """Class-dependent temperature cross-entropy, per example.

        ℓ_γ,ce(x_i, y_i) = −log softmax(z_i / γ_{y_i})_{y_i}
                         = logsumexp(z_i / γ_{y_i}) − z_{i,y_i} / γ_{y_i}

    The whole logit row is divided by the γ of the example's label. Computed with a stable
    log-sum-exp. Spec: "Logit margin". Returns [B].
    """
    z = _f64(logits)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    gamma = _f64(gamma)
    out = np.zeros(z.shape[0], dtype=np.float64)
    for i in range(z.shape[0]):
        scaled = z[i] / gamma[y[i]]
        out[i] = logsumexp(scaled) - scaled[y[i]]
    return out


# ----------------------------------------------------------------------------------------------------
# Representation margin (spec section "Representation margin")
# ----------------------------------------------------------------------------------------------------

def s_bar(V, seen):
    """s̄ = mean of V_k over seen classes (0 if no class is seen). Spec: "Representation margin"."""
    V = _f64(V)
    seen = np.asarray(seen, dtype=bool)
    if not seen.any():
        return 0.0
    return float(np.mean(V[seen]))


def representation_margin_loss(features, labels, s_bar, temperature=1.0, where=None):
    """Per-anchor representation margin loss.

        ℓ_i = log(1 + Σ_{j ≠ i, y_j = y_i, where_j} exp((‖φ_i − φ_j‖₂² − 2 s̄) / τ))

    computed as logaddexp.reduce([0, e_{i,j1}, e_{i,j2}, ...]) (a log-sum-exp that includes the 0
    term for the "1 +"), so it does not overflow for unnormalised features. The pairwise distance is
    the explicit sum of squared differences Σ_t (φ_{i,t} − φ_{j,t})² (always L2, whatever p is used
    for the statistics).
    ℓ_i = 0 for an anchor with no positive and for a masked anchor (where_i False).

    Spec: "Representation margin". Returns [B].
    """
    phi = _f64(features)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    B = y.shape[0]
    valid = _valid_mask(where, B)
    sb = float(s_bar)
    tau = float(temperature)
    out = np.zeros(B, dtype=np.float64)
    for i in range(B):
        if not valid[i]:
            continue
        exponents = [0.0]
        for j in range(B):
            if j == i or not valid[j] or y[j] != y[i]:
                continue
            dist = float(np.sum((phi[i] - phi[j]) ** 2))
            exponents.append((dist - 2.0 * sb) / tau)
        if len(exponents) == 1:
            continue  # no positive: contributes 0
        out[i] = np.logaddexp.reduce(np.asarray(exponents, dtype=np.float64))
    return out


# ----------------------------------------------------------------------------------------------------
# Objective (spec section "Objective" and the two forms of "Representation margin")
# ----------------------------------------------------------------------------------------------------

def mr2_objective_paper(logits, features, labels, A, V, seen, lam=0.1, c_bar=1.0, decay=0.9, p=2.0,
                        temperature=1.0):
    """MR2 objective, paper form.

    1. (A, V, seen) ← update_class_stats(A, V, seen, features, labels, decay, p)   (this batch first)
    2. γ = class_margins(A, V, seen, c̄),  s̄ = mean_{seen} V                      (updated statistics)
    3. L = (1/B) Σ_i [ ℓ_γ,ce(x_i, y_i) + λ · ℓ_s̄,i ]   with τ = temperature (1 in the paper)
       (anchors with no positive contribute ℓ_s̄,i = 0 but still count in the 1/B.)

    Spec: "Objective", "Representation margin — Paper form".
    Returns (loss, A_new, V_new, seen_new, gamma, sbar).
    """
    A_new, V_new, seen_new = update_class_stats(A, V, seen, features, labels, decay, p)
    gamma = class_margins(A_new, V_new, seen_new, c_bar)
    sb = s_bar(V_new, seen_new)
    ce = margin_cross_entropy(logits, labels, gamma)
    rep = representation_margin_loss(features, labels, sb, temperature=temperature)
    loss = float(np.mean(ce + float(lam) * rep))
    return loss, A_new, V_new, seen_new, gamma, sb


def mr2_objective_released(logits, features, labels, A, V, seen, lam=0.1, c_bar=1.0, decay=0.9,
                           p=5.0):
    """MR2 objective, released-code form of the representation term.

    1. Same statistics update as the paper form (with this p), then γ and s̄ from the updated stats.
    2. τ = 10·d (d = feature dimension).
    3. R = d / (10·K) · Σ_{classes c present in the batch} [ (1/n_c) Σ_{i: y_i = c} ℓ_i ]
       where ℓ_i = representation_margin_loss(..., temperature=τ) and K = number of classes (len(A)).
    4. L = (1/B) Σ_i ℓ_γ,ce(x_i, y_i) + λ · R.

    Convention: the per-class mean is over all n_c batch samples of class c (every one is an anchor).
    A class with n_c ≥ 2 has positives for every anchor; a class with n_c = 1 has a mean of 0. So this
    coincides with "mean over anchors that have a positive, 0 if none".
    Convention: K in d/(10·K) is the total number of classes (len(A)), not the number present.

    Spec: "Objective", "Representation margin — Released-code form".
    Returns (loss, A_new, V_new, seen_new, gamma, sbar).
    """
    phi = _f64(features)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    d = phi.shape[-1]
    K = _f64(A).shape[0]
    A_new, V_new, seen_new = update_class_stats(A, V, seen, phi, y, decay, p)
    gamma = class_margins(A_new, V_new, seen_new, c_bar)
    sb = s_bar(V_new, seen_new)
    ce = margin_cross_entropy(logits, y, gamma)
    tau = 10.0 * d
    ell = representation_margin_loss(phi, y, sb, temperature=tau)
    rep_sum = 0.0
    for c in range(K):
        members = np.nonzero(y == c)[0]
        if members.size == 0:
            continue
        rep_sum += float(np.mean(ell[members]))
    rep = d / (10.0 * K) * rep_sum
    loss = float(np.mean(ce) + float(lam) * rep)
    return loss, A_new, V_new, seen_new, gamma, sb


# ----------------------------------------------------------------------------------------------------
# Evaluation (spec section "Evaluation protocol")
# ----------------------------------------------------------------------------------------------------

def per_class_accuracy(predictions, labels, num_classes):
    """Per-class accuracy acc_c = (1/n_c) Σ_{i: y_i = c} [ŷ_i = y_i]; NaN where n_c = 0.

    Spec: "Evaluation protocol". Returns (acc float [K], counts int64 [K]).
    """
    pred = np.asarray(predictions).astype(np.int64).reshape(-1)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    K = int(num_classes)
    acc = np.full(K, np.nan, dtype=np.float64)
    counts = np.zeros(K, dtype=np.int64)
    for c in range(K):
        members = y == c
        counts[c] = int(members.sum())
        if counts[c] > 0:
            acc[c] = float(np.mean(pred[members] == c))
    return acc, counts


def difficulty_tertiles(reference_accuracy):
    """Easy / Medium / Hard groups fixed from the reference (ERM) model's per-class accuracy.

    Sort classes by reference accuracy descending, ties broken by class index ascending (stable sort of
    −acc), split the sorted order with np.array_split into 3 consecutive parts (so when K mod 3 ≠ 0 the
    first parts get the extra classes), and label them 0 = Easy (top third), 1 = Medium, 2 = Hard.

    Convention: a NaN reference accuracy sorts after every number (NumPy puts NaN last), i.e. Hard.
    Spec: "Evaluation protocol". Returns int64 [K].
    """
    acc = _f64(reference_accuracy).reshape(-1)
    order = np.argsort(-acc, kind="stable")
    groups = np.zeros(acc.shape[0], dtype=np.int64)
    for g, part in enumerate(np.array_split(order, 3)):
        groups[part] = g
    return groups


def group_accuracy(acc, groups):
    """Mean per-class accuracy within each group: out[g] = mean_{c: groups_c = g} acc_c, g = 0, 1, 2.

    Convention: NaN accuracies (classes without test examples) are ignored (nanmean); a group with no
    finite accuracy gives NaN. Spec: "Evaluation protocol". Returns [3].
    """
    acc = _f64(acc).reshape(-1)
    groups = np.asarray(groups).astype(np.int64).reshape(-1)
    out = np.full(3, np.nan, dtype=np.float64)
    for g in range(3):
        vals = acc[(groups == g) & ~np.isnan(acc)]
        if vals.size > 0:
            out[g] = float(np.mean(vals))
    return out


def worst_class_accuracy(acc):
    """min_c acc_c, ignoring NaN classes (no examples). Spec: "Evaluation protocol"."""
    return float(np.nanmin(_f64(acc)))


def class_accuracy_std(acc):
    """Population standard deviation (ddof = 0) of per-class accuracies, ignoring NaN classes.
    Spec: "Evaluation protocol"."""
    return float(np.nanstd(_f64(acc), ddof=0))


# ----------------------------------------------------------------------------------------------------
# Self-check
# ----------------------------------------------------------------------------------------------------

if __name__ == "__main__":
    rng = np.random.default_rng(0)
    B, d, K = 24, 6, 5
    phi = rng.normal(size=(B, d)) * 3.0
    y = rng.integers(0, K - 1, size=B)  # class K-1 absent
    z = rng.normal(size=(B, K)) * 2.0

    # lp_sq_norm: p = 2 is the sum of squares; p = 1 is the squared L1 norm.
    assert np.allclose(lp_sq_norm(phi, 2.0), np.sum(phi ** 2, -1))
    assert np.allclose(lp_sq_norm(phi, 1.0), np.sum(np.abs(phi), -1) ** 2)

    # p = 2 identity: a_k + v_k = mean_i ‖φ_i‖² over the class.
    a, v, n = batch_class_moments(phi, y, K, 2.0)
    for k in range(K):
        if n[k]:
            assert np.isclose(a[k] + v[k], np.mean(np.sum(phi[y == k] ** 2, -1)))
        else:
            assert a[k] == 0 and v[k] == 0
    assert n[K - 1] == 0

    # EMA: first sighting copies, second blends, absent classes untouched.
    A0, V0, s0 = np.zeros(K), np.zeros(K), np.zeros(K, bool)
    A1, V1, s1 = update_class_stats(A0, V0, s0, phi, y, 0.9, 2.0)
    assert np.allclose(A1[:K - 1], a[:K - 1]) and not s1[K - 1] and s1[:K - 1].all()
    phi2 = rng.normal(size=(B, d))
    a2, v2, _ = batch_class_moments(phi2, y, K, 2.0)
    A2, V2, s2 = update_class_stats(A1, V1, s1, phi2, y, 0.9, 2.0)
    assert np.allclose(A2[:K - 1], 0.9 * a[:K - 1] + 0.1 * a2[:K - 1])
    assert A2[K - 1] == 0 and not s2[K - 1]

    # γ: mean over seen classes = c̄; unseen classes get c̄; equal statistics give γ ≡ c̄.
    g = class_margins(A2, V2, s2, c_bar=1.7)
    assert np.isclose(g[s2].mean(), 1.7) and g[K - 1] == 1.7
    assert np.allclose(class_margins(np.ones(K), np.ones(K), np.ones(K, bool)), 1.0)
    assert np.allclose(class_margins(A2, V2, np.zeros(K, bool), 2.0), 2.0)
    # γ ≡ 1 gives plain cross-entropy.
    ce = margin_cross_entropy(z, y, np.ones(K))
    plain = -np.log(np.exp(z) / np.exp(z).sum(1, keepdims=True))[np.arange(B), y]
    assert np.allclose(ce, plain)

    # Representation loss: matches a direct formula at small scale, and is finite at huge scale.
    rep = representation_margin_loss(phi, y, 0.5, temperature=50.0)
    for i in range(B):
        pos = [j for j in range(B) if j != i and y[j] == y[i]]
        direct = np.log1p(sum(np.exp((np.sum((phi[i] - phi[j]) ** 2) - 1.0) / 50.0) for j in pos))
        assert np.isclose(rep[i], direct if pos else 0.0)
    big = representation_margin_loss(phi * 1e4, y, 0.0)
    assert np.all(np.isfinite(big)) and big.max() > 1e8
    mask = np.ones(B, bool)
    mask[:3] = False
    rep_m = representation_margin_loss(phi, y, 0.5, 50.0, where=mask)
    assert np.all(rep_m[:3] == 0.0)

    # Objectives run and return consistent state.
    out_p = mr2_objective_paper(z, phi, y, A0, V0, s0)
    out_r = mr2_objective_released(z, phi, y, A0, V0, s0)
    assert np.isfinite(out_p[0]) and np.isfinite(out_r[0])
    assert np.isclose(out_p[4][out_p[3]].mean(), 1.0)

    # Evaluation helpers.
    acc, cnt = per_class_accuracy(np.array([0, 1, 1, 2, 2, 2]), np.array([0, 0, 1, 2, 2, 1]), 4)
    assert np.allclose(acc[:3], [0.5, 0.5, 1.0]) and np.isnan(acc[3]) and list(cnt) == [2, 2, 2, 0]
    ref = np.array([0.9, 0.1, 0.5, 0.5, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4])
    groups = difficulty_tertiles(ref)
    # Sorted desc: 0(.9) 6(.8) 4(.7) 8(.6) | 2(.5) 3(.5) 9(.4) | 5(.3) 7(.2) 1(.1)
    assert list(groups) == [0, 2, 1, 1, 0, 2, 0, 2, 0, 1]
    assert np.allclose(group_accuracy(ref, groups), [0.75, 1.4 / 3, 0.2])
    assert np.isclose(worst_class_accuracy(acc), 0.5)
    assert np.isclose(class_accuracy_std(acc), np.std([0.5, 0.5, 1.0]))

    print("numpy_mr2 self-check passed;",
          f"paper loss {out_p[0]:.6f}, released loss {out_r[0]:.6f}, gamma {np.round(out_p[4], 4)}")
