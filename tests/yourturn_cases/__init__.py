"""Learners' answers for the tests of attnlab/yourturn: each usual mistake written as a learner would write it,
and the hostile corpus (code that must be refused or stopped, never run)."""

MISTAKES = {
    ("attention", "no scale"): '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bnts,bsnh->btnh", weights, v)
''',
    ("attention", "scale 1/d"): '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / q.shape[-1]
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bnts,bsnh->btnh", weights, v)
''',
    ("attention", "softmax over queries"): '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    weights = jax.nn.softmax(scores, axis=-2)
    return jnp.einsum("bnts,bsnh->btnh", weights, v)
''',
    ("attention", "output (B, N, T, H)"): '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bnts,bsnh->bnth", weights, v)
''',
    ("attention", "no max subtracted"): '''def attention(q, k, v):
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    e = jnp.exp(scores)
    weights = e / e.sum(axis=-1, keepdims=True)
    return jnp.einsum("bnts,bsnh->btnh", weights, v)
''',
    ("gqa", "K/V heads mapped wrongly"): '''def attention(q, k, v):
    B, T, N, H = q.shape
    K = k.shape[2]
    qg = q.reshape(B, T, N // K, K, H)
    scores = jnp.einsum("btgkh,bskh->bkgts", qg, k) / jnp.sqrt(H)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgts,bskh->btgkh", weights, v)
    return out.reshape(B, T, N, H)
''',
    ("causal", "off by one"): '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.arange(S)[None, :] < jnp.arange(T)[:, None]
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
''',
    ("causal", "bottom-right aligned"): '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((T, S)), k=S - T) > 0
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
''',
    ("causal", "filled with 0"): '''def causal_weights(q, k):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.arange(S)[None, :] <= jnp.arange(T)[:, None]
    return jax.nn.softmax(jnp.where(mask, scores, 0.0), axis=-1)
''',
    ("window", "NaN in a row that sees nothing"): '''def window_weights(q, k, left, right):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k) / jnp.sqrt(q.shape[-1])
    i, j = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    mask = (j >= i - left) & (j <= i + right)
    return jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
''',
    ("window", "no scale"): '''def window_weights(q, k, left, right):
    T, S = q.shape[1], k.shape[1]
    scores = jnp.einsum("btnh,bsnh->bnts", q, k)
    i, j = jnp.arange(T)[:, None], jnp.arange(S)[None, :]
    mask = (j >= i - left) & (j <= i + right)
    m = jnp.where(mask, scores, -jnp.inf).max(axis=-1, keepdims=True)
    e = jnp.where(mask, jnp.exp(scores - jnp.where(jnp.isfinite(m), m, 0.0)), 0.0)
    total = e.sum(axis=-1, keepdims=True)
    return e / jnp.where(total > 0, total, 1.0)
''',
    ("online_softmax", "o not rescaled"): '''def update(m, l, o, s, v):
    m_new = jnp.maximum(m, s.max(axis=-1))
    m_safe = jnp.where(m_new == -jnp.inf, 0.0, m_new)
    p = jnp.exp(s - m_safe[:, None])
    rescale = jnp.exp(m - m_safe)
    return m_new, rescale * l + p.sum(axis=-1), o + p @ v
''',
    ("online_softmax", "NaN before the first key"): '''def update(m, l, o, s, v):
    m_new = jnp.maximum(m, s.max(axis=-1))
    p = jnp.exp(s - m_new[:, None])
    rescale = jnp.exp(m - m_new)
    return m_new, rescale * l + p.sum(axis=-1), rescale[:, None] * o + p @ v
''',
    ("decode", "no scale"): '''def decode(q, k_cache, v_cache):
    B, _, N, H = q.shape
    K = k_cache.shape[2]
    qg = q.reshape(B, K, N // K, H)
    scores = jnp.einsum("bkgh,bskh->bkgs", qg, k_cache)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bkgs,bskh->bkgh", weights, v_cache).reshape(B, 1, N, H)
''',
    ("decode", "K/V heads mapped wrongly"): '''def decode(q, k_cache, v_cache):
    B, _, N, H = q.shape
    K = k_cache.shape[2]
    qg = q.reshape(B, N // K, K, H)
    scores = jnp.einsum("bgkh,bskh->bkgs", qg, k_cache) / jnp.sqrt(H)
    weights = jax.nn.softmax(scores, axis=-1)
    return jnp.einsum("bkgs,bskh->bgkh", weights, v_cache).reshape(B, 1, N, H)
''',
}
