"""The attention shapes of well-known open models, as presets for the lab's shape.

A preset sets only what the model fixes: query heads (N), key/value heads (K) and head_dim (H).
Batch, sequence lengths, dtype and causal stay the learner's, since they describe a workload,
not a model. `context` is the model's published maximum context (for a caption, never applied).

Each row was checked against the model's published config.json on its Hugging Face repository
(named in `source`; head_dim is hidden_size / num_attention_heads unless the config states it):

    GPT-2 small   n_head 12, n_embd 768 (MHA), n_positions 1024
    Llama 3 8B    num_attention_heads 32, num_key_value_heads 8, hidden_size 4096, 8192 positions
    Llama 3 70B   num_attention_heads 64, num_key_value_heads 8, hidden_size 8192, 8192 positions
    Mistral 7B    num_attention_heads 32, num_key_value_heads 8, hidden_size 4096, 32768 positions
                  (v0.1 attends within a 4096-token sliding window)
    Qwen2.5 7B    num_attention_heads 28, num_key_value_heads 4, hidden_size 3584, 131072 positions
    Gemma 2 9B    num_attention_heads 16, num_key_value_heads 8, head_dim 256 (stated; hidden_size
                  is 3584), 8192 positions, local sliding window of 4096 on alternate layers
"""

from __future__ import annotations

import dataclasses

from attnlab.shapes import AttentionShape


@dataclasses.dataclass(frozen=True)
class ModelPreset:
    name: str
    heads: int
    kv_heads: int
    head_dim: int
    context: int
    source: str
    note: str = ""

    @property
    def variant(self) -> str:
        if self.kv_heads == self.heads:
            return "MHA"
        return "MQA" if self.kv_heads == 1 else "GQA"

    def describe(self) -> str:
        """'Llama 3 8B: 32 query heads, 8 KV heads (GQA, 4 per group), head_dim 128, context 8,192'."""
        group = f", {self.heads // self.kv_heads} per group" if self.variant == "GQA" else ""
        return (f"{self.name}: {self.heads} query heads, {self.kv_heads} KV heads ({self.variant}{group}), "
                f"head_dim {self.head_dim}, context {self.context:,}")


PRESETS: tuple[ModelPreset, ...] = (
    ModelPreset("GPT-2 small", 12, 12, 64, 1024, "openai-community/gpt2 config.json (Hugging Face)"),
    ModelPreset("Llama 3 8B", 32, 8, 128, 8192, "meta-llama/Meta-Llama-3-8B config.json (Hugging Face)"),
    ModelPreset("Llama 3 70B", 64, 8, 128, 8192, "meta-llama/Meta-Llama-3-70B config.json (Hugging Face)"),
    ModelPreset("Mistral 7B", 32, 8, 128, 32768, "mistralai/Mistral-7B-v0.1 config.json (Hugging Face)",
                "v0.1 attends within a 4,096-token sliding window"),
    ModelPreset("Qwen2.5 7B", 28, 4, 128, 131072, "Qwen/Qwen2.5-7B config.json (Hugging Face)"),
    ModelPreset("Gemma 2 9B", 16, 8, 256, 8192, "google/gemma-2-9b config.json (Hugging Face)",
                "alternate layers attend within a 4,096-token sliding window; logits soft-capped at 50"),
)
BY_NAME: dict[str, ModelPreset] = {p.name: p for p in PRESETS}


def get(name: str) -> ModelPreset:
    return BY_NAME[name]


def apply(preset: ModelPreset | str, shape: AttentionShape | None = None) -> AttentionShape:
    """`shape` with the preset's heads, kv_heads and head_dim; batch, lengths, dtype, causal kept."""
    p = get(preset) if isinstance(preset, str) else preset
    return (shape or AttentionShape()).replace(heads=p.heads, kv_heads=p.kv_heads, head_dim=p.head_dim)


def matching(shape: AttentionShape) -> ModelPreset | None:
    """The preset whose heads, kv_heads and head_dim the shape has, if any."""
    for p in PRESETS:
        if (shape.heads, shape.kv_heads, shape.head_dim) == (p.heads, p.kv_heads, p.head_dim):
            return p
    return None
