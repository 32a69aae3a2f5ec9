"""The hostile corpus that gets past the allowlist: code of listed arithmetic that, run as it stands, crashed,
hung or swelled the device worker (issue 44), one set per class of attack. Each entry is (exercise, source,
where): "check" goes through grade.check, "time" through timed.time_solution at TIME_SHAPE. Every one must be
refused or stopped with a sentence, or found wrong, never run as it is, and never kill the worker."""

from attnlab.shapes import AttentionShape

TIME_SHAPE = AttentionShape(batch=1, q_len=128, kv_len=128, heads=2, kv_heads=2, head_dim=32, dtype="float32")


def fn(body: str, name: str = "attention", params: str = "q, k, v") -> str:
    return f"def {name}({params}):\n" + "\n".join("    " + line for line in body.splitlines()) + "\n"


BIG = "1048576"  # 2^20: four of them multiply past int64
OVERFLOW = {
    "broadcast_to past int64": ("attention", fn(f"x = jnp.broadcast_to(q.sum(), ({BIG}, {BIG}, {BIG}, {BIG}))\n"
                                                "return q + x.sum()"), "check"),
    "one_hot of a huge count": ("attention", fn(f"x = jax.nn.one_hot(jnp.zeros(({BIG}, {BIG}), jnp.int32), {BIG})\n"
                                                "return q + x.sum()"), "check"),
    "full past int64": ("attention", fn(f"x = jnp.full(({BIG}, {BIG}, {BIG}, {BIG}), 1.0)\nreturn q + x.mean()"),
                        "check"),
    "einsum of huge squares": ("attention", fn(f"a = jnp.ones(({BIG}, {BIG}))\nb = jnp.einsum('ij,jk->ik', a, a)\n"
                                               "return q + b.sum()"), "check"),
    "broadcast_to past int64, timed": ("attention", fn(f"x = jnp.broadcast_to(q.sum(), ({BIG}, {BIG}, {BIG}, {BIG}))"
                                                       "\nreturn q + x.sum()"), "time"),
    "overflow in the online-softmax step": ("online_softmax", fn(f"x = jnp.broadcast_to(s.sum(), ({BIG}, {BIG}, "
                                                                 f"{BIG}, {BIG}))\nreturn m, l + x.sum(), o", "update",
                                                                 "m, l, o, s, v"), "check"),
}
UNROLLED = {
    "4,096 unrolled operations": ("attention", fn("for i in range(64):\n    for j in range(64):\n"
                                                  "        q = q * 1.0001 + 0.0001\nreturn q"), "check"),
    "a helper called 4,096 times": ("attention", "def helper(x):\n" + "".join(f"    x = x * 1.0001 + {i}\n"
                                                                                 for i in range(8)) + "    return x\n"
                                    + fn("for i in range(64):\n    for j in range(64):\n        q = helper(q)\n"
                                         "return q"), "check"),
    "4,096 softmaxes": ("attention", fn("for i in range(64):\n    for j in range(64):\n"
                                        "        q = jax.nn.softmax(q, axis=-1)\nreturn q"), "check"),
}
CONSTANTS = {
    "a large constant to fold": ("attention", fn("x = jnp.arange(33554432).astype(jnp.float32)\n"
                                                 "return q + jnp.exp(x * 0.0).sum()"), "check"),
    "a 16 MiB constant through 40 folded operations": ("attention", fn(
        "x = jnp.arange(1048576).astype(jnp.float32) * jnp.ones((4, 1))\nfor i in range(40):\n"
        "    x = jnp.exp(x * 0.5 + 1.0) * 0.001\nreturn q + x.sum()"), "check"),
    "a large constant, timed": ("attention", fn("x = jnp.ones((8192, 8192))\nreturn q + (x * 2.0).sum()"), "time"),
}
LONG_RUNS = {
    "16 matmuls of 4096 x 4096": ("attention", fn("x = jnp.ones((4096, 4096))\nfor i in range(16):\n    x = x @ x\n"
                                                  "return q + x.sum()"), "check"),
    "24 matmuls of 2048 x 2048": ("attention", fn("x = jnp.ones((2048, 2048))\nfor i in range(24):\n"
                                                  "    x = x @ x * 0.001\nreturn q + x.sum()"), "check"),
    "16 matmuls of 2048 x 2048, timed": ("attention", fn("x = jnp.ones((2048, 2048))\nfor i in range(16):\n"
                                                         "    x = x @ x * 0.001\nreturn q + x.sum()"), "time"),
}
HEATMAPS = {
    "causal weights at 8192 squared": ("causal", fn("return jnp.ones((1, 1, 8192, 8192)) / 8192", "causal_weights",
                                                    "q, k"), "check"),
    "window weights at 6144 squared": ("window", fn("return jnp.ones((1, 1, 6144, 6144)) / 6144", "window_weights",
                                                    "q, k, left, right"), "check"),
    "causal weights at 2048 squared (within the bound)": ("causal", fn("return jnp.ones((1, 1, 2048, 2048)) / 2048",
                                                                       "causal_weights", "q, k"), "check"),
}
OUTPUTS = {
    "a 512 MiB output of the wrong shape": ("attention", fn("return jnp.zeros((8192, 16384)) + q.sum()"), "check"),
    "a 16 MiB output of the wrong shape": ("attention", fn("return jnp.zeros((2048, 2048)) + q.sum()"), "check"),
    "a wrong shape, timed": ("attention", fn("return jnp.zeros((4096, 4096)) + q.sum()"), "time"),
}
SENTENCES = {
    "range step 0 in a loop": ("attention", fn("for i in range(0, 8, 0):\n    q = q + 1\nreturn q"), "check"),
    "range step 0 as a value": ("attention", fn("r = range(0, 8, 0)\nreturn q"), "check"),
    "returns None": ("attention", fn("return None"), "check"),
    "returns nothing": ("attention", fn("x = q"), "check"),
    "returns two arrays": ("attention", fn("return q, k"), "check"),
    "returns None, timed": ("attention", fn("return None"), "time"),
    "step returns None": ("online_softmax", fn("return None", "update", "m, l, o, s, v"), "check"),
    "complex output, imaginary part 1000": ("attention", fn(
        "scores = jnp.einsum('btnh,bsnh->bnts', q, k) / jnp.sqrt(q.shape[-1])\n"
        "out = jnp.einsum('bnts,bsnh->btnh', jax.nn.softmax(scores, axis=-1), v)\n"
        "return out.astype('complex64') + jnp.sqrt(jnp.full(out.shape, -1e6).astype('complex64'))"), "check"),
}
WRONG_ANSWERS = {
    "right at the checks, q at the timing shape": ("attention", fn(
        "if q.shape[1] == 128:\n    return q\n"
        "scores = jnp.einsum('btnh,bsnh->bnts', q, k) / jnp.sqrt(q.shape[-1])\n"
        "return jnp.einsum('bnts,bsnh->btnh', jax.nn.softmax(scores, axis=-1), v)"), "time"),
    "online softmax with no running max and no rescale": ("online_softmax", fn(
        "p = jnp.exp(s)\nreturn m, l + p.sum(axis=-1), o + p @ v", "update", "m, l, o, s, v"), "check"),
}
# refused before anything reaches the device (the sandbox's walk of the traced program)
REFUSED_IN_THE_SANDBOX = {*OVERFLOW, *UNROLLED, "a large constant to fold", "a large constant, timed", *LONG_RUNS,
                          "causal weights at 8192 squared", "window weights at 6144 squared",
                          "a 512 MiB output of the wrong shape", "a wrong shape, timed", "returns None", "returns nothing",
                          "returns two arrays", "returns None, timed", "step returns None",
                          "complex output, imaginary part 1000"}
HOSTILE = {**OVERFLOW, **UNROLLED, **CONSTANTS, **LONG_RUNS, **HEATMAPS, **OUTPUTS, **SENTENCES, **WRONG_ANSWERS}
