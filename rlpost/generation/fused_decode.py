"""Decode steps of Llama-style models with one C++ call per decoder layer (``train.fused_decode``).

With the decode kernel (rlpost/generation/skinny_matmul.py) a SmolLM2 decode step of 8 rows spends 15-18 ms in its
products, and HF's forward adds about as much in some 6,000 small ATen calls per step (RMSNorm, rotary,
attention, SiLU, residuals) and the Python around them (bench/RESULTS.md). ``decode_layer.cpp`` computes a
whole ``LlamaDecoderLayer`` for the new token of every row in one call, with the kernel's products on the
weights ``decode_weights`` packed, and writes the new keys and values into rlpost's preallocated cache
(rlpost/generation/kv_cache.py).

``fused_decoding(model, packed)`` replaces ``model.forward`` within the block by one that takes a decode step
this way when all of it applies, and calls the model's own forward otherwise:
- the model: ``llama`` or ``qwen2`` (``model.model.layers`` of HF's decoder layers), SiLU MLP, full
  attention in every layer (no sliding window), every linear of every layer and the head packed (no LoRA
  layers: PEFT's wrap their own forward);
- the call: one new token per row (``input_ids [B, 1]``, B within the kernel's rows), a 2-D attention mask
  over the cached positions and the new one or none (no padding), ``position_ids`` given (HF's ``generate`` passes them), every
  layer's cache a ``PreallocatedLayer`` already filled to the same length, no attentions or hidden states
  asked for, no gradient, and no attention dropout (a model in training mode with ``attention_dropout``).
The prefill, other models and other caches run HF's forward, decode products still through the kernel.

The step computes what HF's layers compute, in float, with some sums in another order (the products, the
norms' and attention's reductions, fused multiply-adds): equal to HF's forward to float rounding, not
bitwise, as the kernel is (tests/unit/generation/test_fused_decode.py compares logits and sampled tokens).
Embedding, rotary tables, the final norm and the head stay HF's modules (once per step, not per layer).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial, wraps
from operator import attrgetter

import torch
from transformers import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from rlpost.generation import skinny_matmul
from rlpost.generation.kv_cache import PreallocatedLayer

SUPPORTED = {"llama": "LlamaDecoderLayer", "qwen2": "Qwen2DecoderLayer"}
# What the fused step reads from a supported model, in one place: tests/trainer/test_internals_contract.py checks each
# on a tiny LlamaForCausalLM and Qwen2ForCausalLM, checks that decode_layer.cpp's math on them is HF's, and fails
# when this module reads a part of the model, its config or its cache that is not declared here or in kv_cache.py.
PATCHES = ("PreTrainedModel.forward",)  # an instance attribute of the model within fused_decoding()
MODEL_PARTS = ("config", "lm_head", "model.layers", "model.embed_tokens", "model.rotary_emb", "model.norm")
LINEARS = (  # decoder_layer's order of the packed weights and their biases
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
)  # fmt: skip
# each decoder layer's (one eps for both norms: input_layernorm's)
LAYER_PARTS = (*LINEARS, "self_attn.scaling", "input_layernorm.weight", "input_layernorm.variance_epsilon",
               "post_attention_layernorm.weight")  # fmt: skip
CONFIG_FIELDS = {  # per model type (a field a type does not have is read with a default)
    "llama": ("model_type", "hidden_act", "attention_dropout", "num_attention_heads", "intermediate_size"),
    "qwen2": ("model_type", "hidden_act", "attention_dropout", "num_attention_heads", "intermediate_size",
              "use_sliding_window", "layer_types"),
}  # fmt: skip
# generate()'s keywords to a decode step that the fused step honours (anything else: the model's own forward)
HONOURED = {
    "input_ids", "attention_mask", "position_ids", "cache", "past_key_values", "use_cache", "logits_to_keep",
    "return_dict", "cache_position", "output_attentions", "output_hidden_states",
}  # fmt: skip


@dataclass(frozen=True)
class FusedLayer:
    """One decoder layer's arguments to ``decoder_layer``: packed q, k, v, o, gate, up, down and their biases."""

    packed: list[torch.Tensor]
    biases: list[torch.Tensor | None]
    norm1: torch.Tensor  # [D] input_layernorm's weight
    norm2: torch.Tensor  # [D] post_attention_layernorm's weight
    eps: float
    scaling: float  # attention's 1 / sqrt(head_dim)


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """Why ``model``'s decode steps cannot be fused (None: they can, given its linears packed)."""
    config = getattr(model, "config", None)
    kind = getattr(config, "model_type", None)
    if config is None or kind not in SUPPORTED:
        return f"model type {kind!r} (fused: {', '.join(sorted(SUPPORTED))})"
    if getattr(config, "hidden_act", None) != "silu":
        return f"hidden_act {getattr(config, 'hidden_act', None)!r} (fused: silu)"
    if getattr(config, "use_sliding_window", False) or any(
        layer_type != "full_attention" for layer_type in (getattr(config, "layer_types", None) or [])
    ):
        return "sliding-window attention"
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None or any(type(layer).__name__ != SUPPORTED[kind] for layer in layers):
        return f"layers other than {SUPPORTED[kind]}"
    return None


def _fused_layers(model: torch.nn.Module, packed: dict[torch.nn.Module, torch.Tensor]) -> list[FusedLayer] | None:
    """Each layer's fused arguments, or None when a linear of a layer or the head was not packed."""
    if model.lm_head not in packed:
        return None
    fused = []
    for layer in model.model.layers:
        linears = attrgetter(*LINEARS)(layer)
        if any(linear not in packed for linear in linears):
            return None
        fused.append(
            FusedLayer(
                packed=[packed[linear] for linear in linears],
                biases=[None if linear.bias is None else linear.bias.detach().contiguous() for linear in linears],
                norm1=layer.input_layernorm.weight.detach().contiguous(),
                norm2=layer.post_attention_layernorm.weight.detach().contiguous(),
                eps=float(layer.input_layernorm.variance_epsilon),
                scaling=float(layer.self_attn.scaling),
            )
        )
    return fused


def _decode_call(model, layers: list[FusedLayer], kwargs: dict) -> DynamicCache | None:
    """The cache of a call the fused step can take (see the module docstring), else None."""
    ids, mask, positions = kwargs.get("input_ids"), kwargs.get("attention_mask"), kwargs.get("position_ids")
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    if not set(kwargs) <= HONOURED or kwargs.get("output_attentions") or kwargs.get("output_hidden_states"):
        return None
    if torch.is_grad_enabled() or ids is None or ids.dim() != 2 or ids.size(1) != 1:
        return None
    if model.training and getattr(model.config, "attention_dropout", 0.0):  # HF's forward would drop attention
        return None
    rows = ids.size(0)
    if not 0 < rows <= skinny_matmul.MAX_ROWS or positions is None or tuple(positions.shape) != (rows, 1):
        return None
    if not isinstance(cache, DynamicCache) or len(cache.layers) != len(layers):
        return None
    if not all(isinstance(layer, PreallocatedLayer) and layer.is_initialized for layer in cache.layers):
        return None
    length = cache.layers[0].length
    if any(layer.length != length or layer.keys.size(0) != rows for layer in cache.layers):
        return None
    if mask is not None and tuple(mask.shape) != (rows, length + 1):
        return None
    return cache


def _forward(model, layers: list[FusedLayer], own, *args, **kwargs):
    """``model.forward`` within ``fused_decoding``: a fused decode step where it applies, else ``own``."""
    cache = None if args else _decode_call(model, layers, kwargs)
    if cache is None:
        return own(*args, **kwargs)
    config, base = model.config, model.model
    hidden = base.embed_tokens(kwargs["input_ids"])[:, 0].contiguous()  # [B, D]
    cos, sin = base.rotary_emb(hidden[:, None], kwargs["position_ids"])  # [B, 1, head_dim] each
    cos, sin = cos[:, 0].float().contiguous(), sin[:, 0].float().contiguous()
    mask = kwargs.get("attention_mask")  # None: no padding, every cached position visible (HF's causal mask)
    length = cache.layers[0].length
    visible = torch.ones(hidden.size(0), length + 1, dtype=torch.bool) if mask is None else mask.bool().contiguous()
    extension = skinny_matmul._extension()
    for layer, cached in zip(layers, cache.layers):
        keys, values, position = cached.next_position()
        extension.decoder_layer(
            hidden, layer.packed, layer.biases, layer.norm1, layer.norm2, layer.eps, cos, sin, keys, values,
            position, visible, config.num_attention_heads, config.intermediate_size, layer.scaling,
        )  # fmt: skip
        cached.advance()
    logits = model.lm_head(base.norm(hidden)[:, None])  # [B, 1, V]: the head's packed weight (decode_weights)
    return CausalLMOutputWithPast(logits=logits, cache=cache)


@contextmanager
def fused_decoding(model: torch.nn.Module, packed: dict[torch.nn.Module, torch.Tensor]) -> Iterator[bool]:
    """Within the block, ``model``'s decode steps run one fused call per layer where they can (module docstring).
    ``packed``: what ``skinny_matmul.decode_weights(model)`` yielded. Yields whether the model was fused
    (False: unsupported or not every linear packed; its forward is then left alone)."""
    layers = None if unsupported_reason(model) else _fused_layers(model, packed)
    if layers is None:
        yield False
        return
    instance_forward, own = model.__dict__.get("forward"), model.forward
    # wraps: generate() reads the forward's signature (logits_to_keep, position_ids) through __wrapped__
    model.forward = wraps(own)(partial(_forward, model, layers, own))
    try:
        yield True
    finally:
        if instance_forward is None:
            del model.forward
        else:
            model.forward = instance_forward
