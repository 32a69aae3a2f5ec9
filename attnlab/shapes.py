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
    window: tuple[int, int] | None = None  # (left, right): query i sees keys i-left .. i+right
    kv_lengths: tuple[int, ...] = ()  # real keys per sequence (padding); one value for all, or one per batch

    # --- masks ---------------------------------------------------------------------------------
    @property
    def masked(self) -> bool:
        return self.causal or self.window is not None or bool(self.kv_lengths)

    def kv_lengths_per_batch(self) -> tuple[int, ...] | None:
        """kv_lengths with one value per batch element, or None when there is no padding."""
        if not self.kv_lengths:
            return None
        return self.kv_lengths * self.batch if len(self.kv_lengths) == 1 else self.kv_lengths

    def mask_args(self) -> dict:
        """The masks as keyword arguments of `attention.attention` and the flash code."""
        return dict(causal=self.causal, window=self.window, kv_lengths=self.kv_lengths_per_batch())

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
        if self.window is not None or self.kv_lengths:
            f *= self.visible_fraction()  # a window or padding: count the (query, key) pairs computed
        elif self.causal:
            f /= 2
        return f * 3.5 if backward else f

    def visible_fraction(self) -> float:
        """The fraction of (query, key) pairs the masks let through (1.0 with no mask), counted row by row."""
        i = np.arange(self.q_len)
        lo = np.zeros_like(i)
        hi = np.full_like(i, self.kv_len - 1)
        if self.causal:
            hi = np.minimum(hi, i)
        if self.window is not None:
            lo = np.maximum(lo, i - self.window[0])
            hi = np.minimum(hi, i + self.window[1])
        total = 0
        for n in self.kv_lengths_per_batch() or (self.kv_len,) * self.batch:
            total += np.clip(np.minimum(hi, n - 1) - lo + 1, 0, None).sum()
        return float(total) / (self.batch * self.q_len * self.kv_len)

    def score_bytes(self) -> int:
        """Bytes of the float32 (B, N, T, S) scores: what naive attention and XLA's path hold, each time."""
        return self.score_elements() * 4

    # --- validation ----------------------------------------------------------------------------
    def validate(self) -> list[str]:
        """Every problem with this shape as a sentence a learner can act on; [] when it is valid.

        Only the shape itself is checked here; whether a run of it fits in memory depends on the
        implementation and the device, and is decided by `attnlab.admission`.
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
        if self.window is not None:
            if (len(self.window) != 2 or any(isinstance(w, bool) or not isinstance(w, (int, np.integer))
                                             or not 0 <= w <= FIELD_MAX["kv_len"] for w in self.window)):
                problems.append(f"window must be two whole numbers (left, right) from 0 to "
                                f"{FIELD_MAX['kv_len']:,} (got {self.window!r}).")
        if self.kv_lengths:
            if len(self.kv_lengths) not in (1, self.batch):
                problems.append(f"kv_lengths needs one value, or one per sequence of the batch ({self.batch}); "
                                f"got {len(self.kv_lengths)}.")
            elif any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or not 0 <= n <= self.kv_len
                     for n in self.kv_lengths):
                problems.append(f"each of kv_lengths must be a whole number from 0 to kv_len ({self.kv_len}).")
        return problems

    def describe(self) -> str:
        """Short label such as 'B4 T128 S128 N8 K8 H64 float32'."""
        s = f"B{self.batch} T{self.q_len} S{self.kv_len} N{self.heads} K{self.kv_heads} H{self.head_dim} {self.dtype}"
        s += " causal" if self.causal else ""
        if self.window is not None:
            s += f" window{self.window[0]},{self.window[1]}"
        if self.kv_lengths:
            s += f" kv_lengths{','.join(map(str, self.kv_lengths))}"
        return s

    def replace(self, **changes) -> AttentionShape:
        return dataclasses.replace(self, **changes)

    # --- URL round trip ------------------------------------------------------------------------
    def to_query_params(self) -> dict[str, str]:
        """Only the fields that differ from the defaults, as strings, for a shareable URL."""
        default = AttentionShape()
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value == getattr(default, f.name):
                continue
            if isinstance(value, bool):
                out[f.name] = str(value).lower()
            elif isinstance(value, tuple):
                out[f.name] = ",".join(map(str, value))
            else:
                out[f.name] = str(value)
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
        values, problems = _parse(params)
        if problems:
            return None, problems
        shape = dataclasses.replace(base, **values)
        problems = shape.validate()
        return (None, problems) if problems else (shape, [])

    @classmethod
    def salvage(cls, params: Mapping[str, object], base: AttentionShape | None = None) -> AttentionShape:
        """What a bad link can still say: its values that are good on their own, the defaults for the rest
        (the defaults alone if even those do not make a valid shape). What the sidebar shows after a bad link."""
        base = base or cls()
        values, problems = _parse(params)
        bad = {name for name in values for p in problems if p.startswith(f"{name} ")}
        shape = dataclasses.replace(base, **{k: v for k, v in values.items() if k not in bad})
        return base if shape.validate() else shape


def _parse(params: Mapping[str, object]) -> tuple[dict[str, object], list[str]]:
    """Each field of `params` read on its own: the values that parse, and a sentence for every one that does
    not (all of them, so a learner fixes a link in one go). Relations between fields are `validate`'s."""
    values: dict[str, object] = {}
    problems: list[str] = []
    for name in INT_FIELDS:
        if name not in params:
            continue
        raw = _first(params[name])
        if not re.fullmatch(r"\s*[0-9]{1,9}\s*", raw):
            problems.append(f"{name} must be a positive whole number (got {_quote(raw)}).")
            continue
        values[name] = int(raw)
        if values[name] < 1:
            problems.append(f"{name} must be a positive whole number (got {values[name]}).")
        elif values[name] > FIELD_MAX[name]:
            problems.append(f"{name} ({values[name]}) is above the lab's limit of {FIELD_MAX[name]:,}.")
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
    for name, count in (("window", 2), ("kv_lengths", None)):
        if name not in params:
            continue
        raw = _first(params[name]).strip().lower()
        if raw in ("", "none", "off"):
            values[name] = None if name == "window" else ()
        elif not re.fullmatch(r"[0-9]{1,9}(\s*,\s*[0-9]{1,9}){0,63}", raw):
            problems.append(f"{name} must be whole numbers separated by commas (got {_quote(raw)}).")
        else:
            numbers = tuple(int(x) for x in raw.split(","))
            if count and len(numbers) != count:
                problems.append(f"{name} needs {count} numbers, left and right (got {_quote(raw)}).")
            else:
                values[name] = numbers
    return values, problems


def _first(value: object) -> str:
    """Query params may arrive as a list (repeated keys); take the last, as `st.query_params` does."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    return str(value)[:512]


def _quote(raw: str) -> str:
    """Show a learner's bad input back to them, shortened and with control characters removed."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in raw)
    return repr(clean[:24] + ("…" if len(clean) > 24 else ""))


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
