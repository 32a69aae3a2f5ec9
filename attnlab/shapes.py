"""The shape of one attention call, checked before anything is computed.

Letters follow `jax.nn.dot_product_attention`:

    B = batch          T = q_len (queries)      S = kv_len (keys/values)
    N = heads          K = kv_heads             H = head_dim

Q is (B, T, N, H); K and V are (B, S, K, H). K == N is multi-head attention (MHA), 1 < K < N is
grouped-query attention (GQA, Ainslie et al. 2023, arXiv:2305.13245) and K == 1 is multi-query
attention (MQA, Shazeer 2019, arXiv:1911.02150).

Everything a learner types reaches the lab through `AttentionShape.from_query_params` or the
widgets, and everything is validated here, so a page or the CLI only ever sees a shape that
`validate()` has passed, or the sentences saying why it failed.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping

import ml_dtypes  # NumPy has no bfloat16 of its own; JAX brings it through ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("float32"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype("float16"),
}

# Hard ceilings on any single field: far above anything a lab needs, low enough that no string
# from a URL can ask for an absurd allocation before the memory estimate even runs.
FIELD_MAX = {
    "batch": 4096,
    "q_len": 262_144,
    "kv_len": 262_144,
    "heads": 1024,
    "kv_heads": 1024,
    "head_dim": 1024,
}
INT_FIELDS = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim")
GIB = 1024**3


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    """One attention problem. Defaults are the codelab's: B4 T128 N8 H64, float32, not causal."""

    batch: int = 4
    q_len: int = 128
    kv_len: int = 128
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 64
    dtype: str = "float32"
    causal: bool = False

    # --- sizes -------------------------------------------------------------------------------
    @property
    def itemsize(self) -> int:
        return DTYPES[self.dtype].itemsize

    @property
    def group_size(self) -> int:
        """Query heads that share one key/value head (N // K): 1 for MHA, N for MQA."""
        return self.heads // self.kv_heads

    @property
    def variant(self) -> str:
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def q_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.q_len, self.heads, self.head_dim)

    def kv_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.kv_len, self.kv_heads, self.head_dim)

    def input_bytes(self) -> int:
        """Bytes of Q, K and V together."""
        return (np.prod(self.q_shape()) + 2 * np.prod(self.kv_shape())).item() * self.itemsize

    def output_bytes(self) -> int:
        return int(np.prod(self.q_shape())) * self.itemsize

    def score_elements(self) -> int:
        """Elements of the (B, N, T, S) score matrix that naive attention materialises."""
        return self.batch * self.heads * self.q_len * self.kv_len

    def flops(self, backward: bool = False) -> float:
        """Matmul FLOPs: 2·B·N·T·S·H for Q·Kᵀ plus the same for P·V, halved when causal.

        The convention of FlashAttention (Dao 2022, arXiv:2205.14135, benchmarks) and of the codelab;
        softmax and masking are not counted. Forward + backward counts 3.5x the forward (the backward
        has five matmuls to the forward's two; FlashAttention-2's benchmark convention, arXiv:2307.08691).
        """
        f = 4.0 * self.batch * self.heads * self.q_len * self.kv_len * self.head_dim
        if self.causal:
            f /= 2
        return f * 3.5 if backward else f

    def memory_estimate(self, implementation: str = "sdpa_cudnn") -> int:
        """Peak bytes one forward call needs, by how the implementation works (an estimate).

        Fused kernels (cuDNN, TransformerEngine) stream over S and keep O(T) state; the naive code
        and XLA's SDPA materialise float32 scores and weights of B·N·T·S elements, O(T·S).
        """
        io = self.input_bytes() + self.output_bytes()
        scores = self.score_elements() * 4  # float32
        if implementation in ("naive",):
            return io + 2 * scores
        if implementation in ("sdpa_auto", "sdpa_xla"):
            return io + 3 * scores  # logits, mask/softmax and probabilities, measured ~1.5x naive
        # fused: inputs, output and the float32 log-sum-exp per (B, N, T)
        return io + self.batch * self.heads * self.q_len * 4

    # --- validation ----------------------------------------------------------------------------
    def validate(self, implementation: str | None = None, memory_limit: int | None = None) -> list[str]:
        """Every problem with this shape as a sentence a learner can act on; [] when it is valid.

        With `implementation`, the memory estimate for that implementation is checked against
        `memory_limit` (default: `default_memory_limit()`); without, the most frugal one (fused).
        """
        problems: list[str] = []
        for name in INT_FIELDS:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                problems.append(f"{name} must be a whole number, not {value!r}.")
            elif value < 1:
                problems.append(f"{name} must be a positive whole number (got {value}).")
            elif value > FIELD_MAX[name]:
                problems.append(f"{name} ({value}) is above the lab's limit of {FIELD_MAX[name]:,}.")
        if self.dtype not in DTYPES:
            problems.append(f"dtype must be one of {', '.join(DTYPES)} (got {self.dtype!r}).")
        if not isinstance(self.causal, (bool, np.bool_)):
            problems.append(f"causal must be true or false (got {self.causal!r}).")
        if problems:
            return problems
        if self.kv_heads > self.heads:
            problems.append(f"kv_heads ({self.kv_heads}) cannot exceed heads ({self.heads}).")
        elif self.heads % self.kv_heads:
            problems.append(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}).")
        if problems:
            return problems
        limit = default_memory_limit() if memory_limit is None else memory_limit
        need = self.memory_estimate(implementation or "sdpa_cudnn")
        if need > limit:
            who = f"{implementation}" if implementation else "even a fused kernel"
            problems.append(
                f"This shape needs about {format_bytes(need)} for {who}, over this lab's cap of "
                f"{format_bytes(limit)}. Make batch, q_len, kv_len or heads smaller."
            )
        return problems

    def describe(self) -> str:
        """Short label such as 'B4 T128 S128 N8 K8 H64 float32'."""
        s = f"B{self.batch} T{self.q_len} S{self.kv_len} N{self.heads} K{self.kv_heads} H{self.head_dim} {self.dtype}"
        return s + (" causal" if self.causal else "")

    def replace(self, **changes) -> AttentionShape:
        return dataclasses.replace(self, **changes)

    # --- URL round trip ------------------------------------------------------------------------
    def to_query_params(self) -> dict[str, str]:
        """Only the fields that differ from the defaults, as strings, for a shareable URL."""
        default = AttentionShape()
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value != getattr(default, f.name):
                out[f.name] = str(value).lower() if isinstance(value, bool) else str(value)
        return out

    @classmethod
    def from_query_params(
        cls, params: Mapping[str, object], base: AttentionShape | None = None
    ) -> tuple[AttentionShape | None, list[str]]:
        """Parse untrusted strings (a URL's query) into a valid shape, or return the messages.

        Unknown keys are ignored; missing keys keep `base` (the defaults). Nothing is evaluated:
        integers must match ``[0-9]{1,9}``, dtype must be a known name, causal a yes/no word.
        """
        base = base or cls()
        values: dict[str, object] = {}
        problems: list[str] = []
        for name in INT_FIELDS:
            if name not in params:
                continue
            raw = _first(params[name])
            if not re.fullmatch(r"\s*[0-9]{1,9}\s*", raw):
                problems.append(f"{name} must be a positive whole number (got {_quote(raw)}).")
            else:
                values[name] = int(raw)
        if "dtype" in params:
            raw = _first(params["dtype"]).strip().lower()
            if raw not in DTYPES:
                problems.append(f"dtype must be one of {', '.join(DTYPES)} (got {_quote(raw)}).")
            else:
                values["dtype"] = raw
        if "causal" in params:
            raw = _first(params["causal"]).strip().lower()
            if raw in ("true", "1", "yes", "on"):
                values["causal"] = True
            elif raw in ("false", "0", "no", "off", ""):
                values["causal"] = False
            else:
                problems.append(f"causal must be true or false (got {_quote(raw)}).")
        if problems:
            return None, problems
        shape = dataclasses.replace(base, **values)
        problems = shape.validate()
        return (None, problems) if problems else (shape, [])


def _first(value: object) -> str:
    """Query params may arrive as a list (repeated keys); take the first, always as a string."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else ""
    return str(value)[:64]


def _quote(raw: str) -> str:
    """Show a learner's bad input back to them, shortened and with control characters removed."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in raw)
    return repr(clean[:24] + ("…" if len(clean) > 24 else ""))


def default_memory_limit() -> int:
    """The cap on one call's estimated memory, in bytes.

    `ATTNLAB_MEMORY_LIMIT_GIB` overrides it. Otherwise: half of the accelerator's free memory
    (the other half is left for XLA's workspace, other learners and cached executables), or 4 GiB
    on the CPU backend, where a laptop's RAM is shared with everything else.
    """
    env = os.environ.get("ATTNLAB_MEMORY_LIMIT_GIB")
    if env:
        try:
            return int(float(env) * GIB)
        except ValueError:
            pass
    from attnlab import device  # late: importing jax backends is slow

    info = device.info()
    if info.backend != "cpu" and info.memory_free_bytes:
        return int(info.memory_free_bytes * 0.5)
    return 4 * GIB


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
