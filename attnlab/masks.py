"""Attention masks: which (query, key) pairs are visible, True where a query may attend (the `jax.nn` convention).

A shape's masks are one frozen value, `Mask`, made of mask types (tokamax's `Mask` is the model). Every mask
type lets query i see one run of keys, first(i) .. last(i); a mask is the AND of its types, so the rule
(`Mask.visible`), the fraction it lets through (`Mask.visible_fraction`) and a skippable tile come from the
same few lines. The types follow `jax.nn.dot_product_attention`:

    Causal()          is_causal=True                 query i sees keys 0..i (aligned top-left)
    Window((L, R))    local_window_size=(L, R)       query i sees keys i-L .. i+R (a sliding window)
    Padding((S_b,))   key_value_seq_lengths=[S_b]    in batch b only the first S_b keys are real

Each type also says how a URL (`?window=256,0`), the CLI (`--window 256 0`) and the sidebar write it, and
checks its values. A new mask type is one class here, one line in `MASK_TYPES` and its plain array in
tests/mask_arrays.py's PLAIN (the float64 reference builds its mask from `Mask.matrix`, so only a second,
plain construction checks the rule); a backend that takes it names it in its `masks` (others refuse it in
words). `Mask.matrix` takes an array module `xp` (default `jax.numpy`); the value needs no JAX."""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Callable
from typing import ClassVar, cast

import numpy as np

KV_MAX = 262_144  # the longest kv_len a shape may have (shapes.FIELD_MAX)


def quote(raw: str) -> str:
    """Show a learner's bad input back to them, shortened and with control characters removed."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in raw)
    return repr(clean[:24] + ("…" if len(clean) > 24 else ""))


def _whole(n) -> bool:  # a whole number, not a bool
    return not isinstance(n, bool) and isinstance(n, (int, np.integer))


@dataclasses.dataclass(frozen=True)
class MaskType:
    """One kind of mask. A subclass holds its value and says which keys query i may see."""

    key: ClassVar[str]  # its name in the URL, the CLI (--key) and AttentionShape(key=...)
    feature: ClassVar[str]  # in words, as a backend's requirements list it
    off: ClassVar[object]  # the value that means "none of this mask" (AttentionShape's default)
    count: ClassVar[int | None]  # numbers it is written with: 0 a yes/no flag, None one or more
    help: ClassVar[str]  # one line for the CLI's --help
    metavar: ClassVar[str | tuple[str, ...] | None] = None  # the CLI's names for its numbers
    widget: ClassVar[tuple[str, ...]] = ()  # the sidebar's text box: label, placeholder, help (a flag: a toggle)

    @property
    def value(self):
        """What `AttentionShape(key=value)` takes and `Mask.get(key)` returns."""
        return getattr(self, dataclasses.fields(self)[0].name)

    def keys(self, q_index):
        """(first, last): the keys query `q_index` may see, inclusive; None where this type sets no bound."""
        raise NotImplementedError

    def problems(self, batch: int, kv_len: int) -> list[str]:  # what is wrong with its value, in sentences
        return []

    def text(self) -> str:
        """Its value as a URL writes it."""
        return "true" if self.count == 0 else ",".join(map(str, self.value))

    def label(self) -> str:
        """Its part of `AttentionShape.describe`."""
        return self.key if self.count == 0 else f"{self.key}{self.text()}"

    def sequence(self, b) -> MaskType:
        """This type for sequence `b` (a number, or an index array that broadcasts against the indices)."""
        return self

    @classmethod
    def from_value(cls, value) -> MaskType | None:
        """The mask for `value` (a list kept as a tuple), or None when `value` means none (None, False, ())."""
        if value is None or (isinstance(value, (bool, np.bool_, tuple, list)) and not value):
            return None
        make = cast("Callable[[object], MaskType]", cls)  # a mask type is a dataclass of one field: its value
        return make(tuple(value) if isinstance(value, list) else value)

    @classmethod
    def parse(cls, raw: str) -> tuple[object, str | None]:
        """A URL's text (stripped, lower case): its value, or the sentence saying why it is not one."""
        if raw in ("", "none", "off"):
            return cls.off, None
        if not re.fullmatch(r"[0-9]{1,9}(\s*,\s*[0-9]{1,9}){0,63}", raw):
            return None, f"{cls.key} must be whole numbers separated by commas (got {quote(raw)})."
        numbers = tuple(int(x) for x in raw.split(","))
        if cls.count and len(numbers) != cls.count:
            names = f", {' and '.join(cls.metavar).lower()}" if isinstance(cls.metavar, tuple) else ""
            return None, f"{cls.key} needs {cls.count} number{'s' * (cls.count > 1)}{names} (got {quote(raw)})."
        return numbers, None


@dataclasses.dataclass(frozen=True)
class Causal(MaskType):
    key = "causal"
    feature = "causal"
    off = False
    count = 0
    help = "query i sees keys 0..i (jax.nn's is_causal, aligned top-left)"
    on: object = True

    def keys(self, q_index):
        return None, q_index

    def problems(self, batch, kv_len):
        return [] if isinstance(self.on, (bool, np.bool_)) else [f"causal must be true or false (got {self.on!r})."]

    @classmethod
    def parse(cls, raw):
        if raw in ("true", "1", "yes", "on"):
            return True, None
        if raw in ("false", "0", "no", "off", ""):
            return False, None
        return None, f"causal must be true or false (got {quote(raw)})."


@dataclasses.dataclass(frozen=True)
class Window(MaskType):
    key = "window"
    feature = "sliding window"
    off = None
    count = 2
    help = "sliding window: query i sees keys i-left .. i+right (local_window_size)"
    metavar = ("LEFT", "RIGHT")
    widget = ("sliding window: left, right", "e.g. 256,0", "Query i sees keys i-left .. i+right "
              "(jax.nn.dot_product_attention's local_window_size). Empty: no window.")
    left_right: tuple[int, int] = (0, 0)

    def keys(self, q_index):
        left, right = self.left_right
        return q_index - left, q_index + right

    def problems(self, batch, kv_len):
        w = self.left_right
        if len(w) != 2 or not all(_whole(n) and 0 <= n <= KV_MAX for n in w):
            return [f"window must be two whole numbers (left, right) from 0 to {KV_MAX:,} (got {w!r})."]
        return []


@dataclasses.dataclass(frozen=True)
class Padding(MaskType):
    key = "kv_lengths"
    feature = "padding"
    off = ()
    count = None
    help = "padding: real keys per sequence, one for all or one each (key_value_seq_lengths)"
    metavar = "N"
    widget = ("padding: real keys per sequence", "e.g. 100 or 100,64", "One number for every sequence, or one per "
              "sequence of the batch (key_value_seq_lengths). Empty: no padding.")
    lengths: object = ()  # a tuple (a shape's: one for all, or one per sequence), or an array laid out to broadcast

    def keys(self, q_index):
        return None, self.lengths - 1  # keys at or past a sequence's length are padding

    def problems(self, batch, kv_len):
        if len(self.lengths) not in (1, batch):
            return [f"kv_lengths needs one value, or one per sequence of the batch ({batch}); "
                    f"got {len(self.lengths)}."]
        if not all(_whole(n) and 0 <= n <= kv_len for n in self.lengths):
            return [f"each of kv_lengths must be a whole number from 0 to kv_len ({kv_len})."]
        return []

    def sequence(self, b):
        n = self.lengths if hasattr(self.lengths, "shape") else np.asarray(self.lengths)
        return Padding(n[np.minimum(b, len(n) - 1)])  # one length: every sequence's


MASK_TYPES: tuple[type[MaskType], ...] = (Causal, Window, Padding)  # the order of the URL, the CLI and describe
BY_KEY: dict[str, type[MaskType]] = {t.key: t for t in MASK_TYPES}


@dataclasses.dataclass(frozen=True)
class Mask:
    """A shape's masks as one value: the AND of its mask types (none: every key is visible)."""

    types: tuple[MaskType, ...] = ()

    @classmethod
    def of(cls, **values) -> Mask:
        """Mask.of(causal=True, window=(16, 0), kv_lengths=(100,)): one mask type each by its key."""
        return cls().replace(**values)

    def replace(self, **values) -> Mask:
        """This mask with the types named set (to their off value: removed)."""
        if unknown := set(values) - set(BY_KEY):
            raise TypeError(f"no mask type {', '.join(sorted(unknown))}; the lab's are {', '.join(BY_KEY)}")
        have: dict[str, MaskType | None] = {t.key: t for t in self.types}
        for key, value in values.items():
            have[key] = BY_KEY[key].from_value(value)
        return Mask(tuple(m for t in MASK_TYPES if (m := have.get(t.key)) is not None))

    def __bool__(self) -> bool:
        return bool(self.types)

    def get(self, key: str):
        """The value of mask type `key`, or its off value (False, None, ()) when this mask has none."""
        return next((t.value for t in self.types if t.key == key), BY_KEY[key].off)

    @property
    def features(self) -> tuple[str, ...]:
        return tuple(t.feature for t in self.types)

    def visible(self, q_index, k_index):
        """The one mask rule of the lab: True where query `q_index` may see key `k_index` (arrays that
        broadcast: a tile of a flash kernel or a whole (T, S) matrix); None with no mask."""
        ok = None
        for t in self.types:
            first, last = t.keys(q_index)
            for seen in ([] if first is None else [k_index >= first]) + ([] if last is None else [k_index <= last]):
                ok = seen if ok is None else ok & seen
        return ok

    def sequence(self, b) -> Mask:
        return Mask(tuple(t.sequence(b) for t in self.types))

    def matrix(self, q_len: int, kv_len: int, batch: int | None = None, rows=None, xp=None):
        """The mask as (T, S), or (B, 1, T, S) for a mask that differs by sequence; None with no mask. `rows`
        (query positions, default 0..T-1): those queries only (a few rows of a long sequence, no (T, S) matrix)."""
        xp = xp or _jnp()
        i = (xp.arange(q_len) if rows is None else xp.asarray(rows))[:, None]  # (t, 1)
        mask = self if batch is None else self.sequence(np.arange(batch)[:, None, None, None])  # (B, 1, 1, 1)
        return mask.visible(i, xp.arange(kv_len)[None, :])

    def visible_fraction(self, q_len: int, kv_len: int, batch: int = 1) -> float:
        """The fraction of the batch's (query, key) pairs this mask lets through, counted row by row from
        each query's first and last visible key (O(T) per distinct sequence, never a (T, S) matrix)."""
        rows = np.arange(q_len)
        total = 0
        for mask, n in collections.Counter(self.sequence(b) for b in range(batch)).items():
            first, last = np.zeros(q_len, np.int64), np.full(q_len, kv_len - 1)
            for t in mask.types:
                lo, hi = t.keys(rows)
                first = first if lo is None else np.maximum(first, lo)
                last = last if hi is None else np.minimum(last, hi)
            total += n * int(np.clip(last - first + 1, 0, None).sum())
        return total / (batch * q_len * kv_len)

    def problems(self, batch: int, kv_len: int) -> list[str]:
        return [p for t in self.types for p in t.problems(batch, kv_len)]

    def to_query_params(self) -> dict[str, str]:
        return {t.key: t.text() for t in self.types}

    def describe(self) -> str:
        return " ".join(t.label() for t in self.types)


# --- the rule with jax.nn's arguments -------------------------------------------------------
def _jnp():  # jax.numpy, imported here: the mask value above needs no JAX
    import jax.numpy as jnp
    return jnp


def visible(q_index, k_index, *, causal: bool = False, window=None, kv_length=None):
    """`Mask.visible` with jax.nn's arguments; kv_length: keys at or past it are padding (number or array)."""
    return Mask.of(causal=causal, window=window, kv_lengths=kv_length).visible(q_index, k_index)
