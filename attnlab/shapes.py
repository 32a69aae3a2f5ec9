"""The shape of one attention call, checked before anything is computed.

Letters follow `jax.nn.dot_product_attention`:

    B = batch          T = q_len (queries)      S = kv_len (keys/values)
    N = heads          K = kv_heads             H = head_dim

Q is (B, T, N, H); K and V are (B, S, K, H). K == N is multi-head attention (MHA), 1 < K < N is grouped-query
attention (GQA, Ainslie et al. 2023, arXiv:2305.13245) and K == 1 is multi-query attention (MQA, Shazeer 2019,
arXiv:1911.02150).

Everything a learner types reaches the lab through `AttentionShape.from_query_params` or the widgets and is
validated here, so a page or the CLI only sees a shape `validate()` passed, or the sentences why not."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

import ml_dtypes  # NumPy has no bfloat16 of its own; JAX brings it through ml_dtypes
import numpy as np

from attnlab import masks
from attnlab.masks import Mask

DTYPES: dict[str, np.dtype] = {
    "float32": np.dtype("float32"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float16": np.dtype("float16"),
}

# Ceilings on each field: far above a lab's needs, low enough that no URL asks for an absurd allocation.
FIELD_MAX = {
    "batch": 4096,
    "q_len": 262_144,
    "kv_len": 262_144,
    "heads": 1024,
    "kv_heads": 1024,
    "head_dim": 1024,
}
INT_FIELDS = ("batch", "q_len", "kv_len", "heads", "kv_heads", "head_dim")
MASK_KEYS = tuple(t.key for t in masks.MASK_TYPES)
PARAM_KEYS = (*INT_FIELDS, "dtype", *MASK_KEYS)  # what a URL may say about a shape
GIB = 1024**3
NO_MASK = Mask()


@dataclasses.dataclass(frozen=True, init=False)
class AttentionShape:
    """One attention problem. Defaults are the codelab's: B4 T128 N8 H64, float32, no mask."""

    batch: int = 4
    q_len: int = 128
    kv_len: int = 128
    heads: int = 8
    kv_heads: int = 8
    head_dim: int = 64
    dtype: str = "float32"
    mask: Mask = NO_MASK  # which (query, key) pairs are visible (attnlab.masks)

    def __init__(self, batch: int = 4, q_len: int = 128, kv_len: int = 128, heads: int = 8, kv_heads: int = 8,
                 head_dim: int = 64, dtype: str = "float32", mask: Mask = NO_MASK, **mask_types):
        """`mask_types` set one mask type each by its key, on top of `mask`, as a URL does:
        AttentionShape(causal=True, window=(16, 0), kv_lengths=(100,)) (the lab's types: `masks.MASK_TYPES`)."""
        for name, value in (("batch", batch), ("q_len", q_len), ("kv_len", kv_len), ("heads", heads),
                            ("kv_heads", kv_heads), ("head_dim", head_dim), ("dtype", dtype)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "mask", mask.replace(**mask_types))

    # --- masks: shorthands for the mask's types, as jax.nn.dot_product_attention names them ------
    @property
    def causal(self) -> bool:
        return self.mask.get("causal")

    @property
    def window(self) -> tuple[int, int] | None:  # (left, right): query i sees keys i-left .. i+right
        return self.mask.get("window")

    @property
    def kv_lengths(self) -> tuple[int, ...]:  # real keys per sequence (padding); one value for all, or one per batch
        return self.mask.get("kv_lengths")

    @property
    def masked(self) -> bool:
        return bool(self.mask)

    def kv_lengths_per_batch(self) -> tuple[int, ...] | None:
        """kv_lengths with one value per batch element, or None when there is no padding."""
        if not self.kv_lengths:
            return None
        return self.kv_lengths * self.batch if len(self.kv_lengths) == 1 else self.kv_lengths

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
        """Matmul FLOPs by FlashAttention's convention (Dao 2022, arXiv:2205.14135): 2·B·N·T·S·H for Q·Kᵀ plus
        the same for P·V, halved when causal; softmax and masks not counted. Forward + backward is 3.5x the
        forward (five matmuls to two; FlashAttention-2, arXiv:2307.08691)."""
        f = 4.0 * self.batch * self.heads * self.q_len * self.kv_len * self.head_dim
        if self.mask.features == ("causal",):
            f /= 2  # the convention's half, not the (T + 1) / 2T pairs a causal mask lets through
        elif self.mask:
            f *= self.visible_fraction()  # a window, padding...: count the (query, key) pairs computed
        return f * 3.5 if backward else f

    def visible_fraction(self) -> float:
        """The fraction of (query, key) pairs the mask lets through (1.0 with no mask), counted row by row."""
        return self.mask.visible_fraction(self.q_len, self.kv_len, self.batch)

    def score_bytes(self) -> int:
        """Bytes of the float32 (B, N, T, S) scores: what naive attention and XLA's path hold, each time."""
        return self.score_elements() * 4

    # --- validation ----------------------------------------------------------------------------
    def validate(self) -> list[str]:
        """Every problem as a sentence a learner can act on ([] if valid); memory: attnlab.admission."""
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
        if problems:
            return problems
        if self.kv_heads > self.heads:
            problems.append(f"kv_heads ({self.kv_heads}) cannot exceed heads ({self.heads}).")
        elif self.heads % self.kv_heads:
            problems.append(f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads}).")
        problems += self.mask.problems(self.batch, self.kv_len)
        return problems

    def describe(self) -> str:
        """Short label such as 'B4 T128 S128 N8 K8 H64 float32'."""
        s = f"B{self.batch} T{self.q_len} S{self.kv_len} N{self.heads} K{self.kv_heads} H{self.head_dim} {self.dtype}"
        return f"{s} {self.mask.describe()}" if self.mask else s

    def columns(self) -> dict:
        """A result row's shape columns: sizes, dtype, one per mask type (a flag's bool, else URL text)."""
        texts = self.mask.to_query_params()
        return {**{k: getattr(self, k) for k in (*INT_FIELDS, "dtype")},
                **{t.key: t.key in texts if t.count == 0 else texts.get(t.key) for t in masks.MASK_TYPES}}

    def replace(self, **changes) -> AttentionShape:
        return dataclasses.replace(self, **changes)

    # --- URL round trip ------------------------------------------------------------------------
    def to_query_params(self) -> dict[str, str]:
        """Only the fields that differ from the defaults, as strings, for a shareable URL."""
        default = AttentionShape()
        out = {}
        for name in (*INT_FIELDS, "dtype"):
            if getattr(self, name) != getattr(default, name):
                out[name] = str(getattr(self, name))
        return {**out, **self.mask.to_query_params()}

    @classmethod
    def from_query_params(
        cls, params: Mapping[str, object], base: AttentionShape | None = None
    ) -> tuple[AttentionShape | None, list[str]]:
        """Parse untrusted strings (a URL's query) into a valid shape, or return the messages. Unknown keys
        are ignored; missing keys keep `base`. Nothing is evaluated: integers must match ``[0-9]{1,9}``."""
        base = base or cls()
        values, problems = _parse(params)
        # the fields that parse, over `base`, checked together too: every problem of a link named at once
        together = _good(base, values, problems).validate()
        problems += [p for p in together if p not in problems]
        return (None, problems) if problems else (dataclasses.replace(base, **values), [])

    @classmethod
    def kept(cls, params: Mapping[str, object], base: AttentionShape | None = None) -> AttentionShape:
        """A link's values that are valid on their own, over `base` (the defaults): not yet checked together."""
        return _good(base or cls(), *_parse(params))

    @classmethod
    def salvage(cls, params: Mapping[str, object], base: AttentionShape | None = None) -> AttentionShape:
        """A bad link's good values over the defaults (the defaults alone if invalid): the sidebar's shape."""
        shape = cls.kept(params, base)
        return (base or cls()) if shape.validate() else shape


def _good(base: AttentionShape, values: dict[str, Any], problems: list[str]) -> AttentionShape:
    """`base` with the parsed values that no problem names (each checked on its own, not yet together)."""
    bad = {name for name in values for p in problems if p.startswith(f"{name} ")}
    return dataclasses.replace(base, **{k: v for k, v in values.items() if k not in bad})


def _parse(params: Mapping[str, object]) -> tuple[dict[str, Any], list[str]]:
    """Each field of `params` read on its own: the values that parse, and a sentence for every one that does
    not (all of them, so a learner fixes a link in one go). Relations between fields are `validate`'s."""
    values: dict[str, Any] = {}  # AttentionShape's keyword arguments: ints, a dtype's name, mask types' values
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
    for t in masks.MASK_TYPES:
        if t.key in params:
            value, problem = t.parse(_first(params[t.key]).strip().lower())
            problems += [problem] if problem else []
            values.update({} if problem else {t.key: value})
    return values, problems


def _first(value: object) -> str:
    """Query params may arrive as a list (repeated keys); take the last, as `st.query_params` does."""
    if isinstance(value, (list, tuple)):
        value = value[-1] if value else ""
    return str(value)[:512]


_quote = masks.quote


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"
