"""A KV cache that writes into buffers sized for the whole generation (``train.kv_cache=preallocated``).

HF's default ``DynamicCache`` grows each layer's keys and values with ``torch.cat`` at every decode step, so
every step copies the whole cache: ``T`` new tokens copy ``O(T^2)`` cached positions. On SmolLM2-135M (30
layers, 3 KV heads of 64) one cached position of one row is 46 KB; at 8 rows and 300 positions a decode
step copies 110 MB next to the 538 MB of weights it reads. Here each layer allocates
``[B, kv_heads, capacity, head_dim]`` once, at its first update, with ``capacity`` = prompt width + max new
tokens; an update writes the new positions in place and attention reads a view of the filled part.

The values and their order are those of the dynamic cache, so the samples are bitwise the same
(tests/unit/generation/test_kv_cache.py). A layer that outgrows its capacity (a caller that generates past the
length it announced) doubles its buffer, one copy. Decoder-only models with one sequence per row (no beams)
and no cache of their own get it (``preallocated_generation``); anything else runs ``generate`` unchanged.
Cost: the buffers, ``2 x layers x B x kv_heads x capacity x head_dim`` floats (SmolLM2, 8 rows x 300
positions: 110 MB), allocated at the prefill instead of grown by the decode steps.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

# What this module relies on in transformers, in one place: tests/trainer/test_internals_contract.py pins each against
# the installed transformers (a member DynamicLayer gains or loses fails there by name) and fails when this module
# uses a transformers name or patch that is not declared here.
PATCHES = ("GenerationMixin.generate",)  # an instance attribute of the model within wrapped_generate()
OVERRIDDEN = {  # DynamicLayer's members PreallocatedLayer overrides -> their parameters in DynamicLayer
    "__init__": ("self", "kwargs"),
    "lazy_initialization": ("self", "key_states", "value_states"),
    "update": ("self", "key_states", "value_states", "args", "kwargs"),
    "reorder_cache": ("self", "beam_idx"),
    "batch_select_indices": ("self", "indices"),
    "batch_repeat_interleave": ("self", "repeats"),
    "crop": ("self", "tokens_to_remove"),
    "reset": ("self",),
}
# DynamicLayer's other members, used as they are: they read keys / values / is_initialized, which PreallocatedLayer
# keeps current (offload / prefetch belong to DynamicCache(offloading=True), which rlpost never creates)
INHERITED = ("get_seq_length", "get_mask_sizes", "get_max_length", "offload", "prefetch")
LAYER_STATE = ("keys", "values", "is_initialized", "device")  # DynamicLayer's attributes PreallocatedLayer sets
# DynamicCache's members used here and by prefix_generation.py / fused_decode.py: a cache created without a config
# appends layer_class_to_replicate() per layer at its first update, which PreallocatedCache points at its own layer
CACHE_MEMBERS = ("layers", "layer_class_to_replicate", "reorder_cache", "get_seq_length")
GENERATION_SETTINGS = ("num_beams", "num_return_sequences", "cache_implementation", "max_new_tokens", "max_length")
MODEL_PARTS = ("generation_config", "config.is_encoder_decoder")  # what plain_sampling reads from the model
GENERATE_KEYWORDS = ("generation_config", "cache")  # generate()'s, and the model keyword that carries our cache


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in ``[B, kv_heads, capacity, head_dim]`` buffers; ``keys``/``values`` are
    views ``[B, kv_heads, length, head_dim]`` of the filled part (what attention and HF's mask sizes read)."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity, self.length = capacity, 0
        self._keys = self._values = torch.empty(0)  # allocated at the first update

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        rows, heads, new, dim = key_states.shape
        size = max(self.capacity, new)
        self._keys = key_states.new_empty(rows, heads, size, dim)
        self._values = value_states.new_empty(rows, heads, size, value_states.size(-1))
        self.length = 0
        self._expose()
        self.is_initialized = True

    def _expose(self) -> None:
        self.keys, self.values = self._keys[:, :, : self.length], self._values[:, :, : self.length]

    def _grow(self, needed: int) -> None:
        """Double the buffers (at least to ``needed`` positions), keeping the filled part."""
        size = max(needed, 2 * self._keys.size(2))
        keys, values = self._keys, self._values
        self._keys = keys.new_empty(*keys.shape[:2], size, keys.size(3))
        self._values = values.new_empty(*values.shape[:2], size, values.size(3))
        self._keys[:, :, : self.length] = keys[:, :, : self.length]
        self._values[:, :, : self.length] = values[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write ``key_states``/``value_states [B, kv_heads, new, head_dim]`` after the filled part; returns the
        views of all cached positions."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.size(2)
        if end > self._keys.size(2):
            self._grow(end)
        self._keys[:, :, self.length : end] = key_states
        self._values[:, :, self.length : end] = value_states
        self.length = end
        self._expose()
        return self.keys, self.values

    def next_position(self) -> tuple[torch.Tensor, torch.Tensor, int]:
        """The buffers ``[B, kv_heads, capacity, head_dim]`` and the position the next token's keys and values
        go to, with room for it (a full layer doubles first): for writers of their own (rlpost/generation/fused_decode.py),
        who then call ``advance()``."""
        if self.length >= self._keys.size(2):
            self._grow(self.length + 1)
        return self._keys, self._values, self.length

    def advance(self) -> None:
        """One more position filled (written into the buffers from ``next_position``)."""
        self.length += 1
        self._expose()

    def _select_rows(self, index: torch.Tensor) -> None:
        """Keep the buffer rows ``index [B']`` (a reorder, selection or repetition): only the filled part is copied."""
        index = index.to(self._keys.device)
        for name in ("_keys", "_values"):
            old = getattr(self, name)
            new = old.new_empty(index.numel(), *old.shape[1:])
            new[:, :, : self.length] = old[:, :, : self.length].index_select(0, index)
            setattr(self, name, new)
        self._expose()

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.is_initialized:
            self._select_rows(beam_idx)

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            rows = torch.arange(self._keys.size(0), device=self._keys.device)[indices]
            self._select_rows(rows)

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            self._select_rows(torch.arange(self._keys.size(0)).repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        """Drop the last ``-tokens_to_remove`` positions (HF's convention: a negative count)."""
        if tokens_to_remove > 0:
            raise ValueError(f"crop takes a negative number of positions to remove, got {tokens_to_remove}")
        if self.is_initialized and tokens_to_remove:
            self.length = max(self.length + tokens_to_remove, 0)
            self._expose()

    def reset(self) -> None:
        self._keys = self._values = torch.empty(0)
        self.length = 0
        super().reset()


class PreallocatedCache(DynamicCache):
    """A ``DynamicCache`` whose layers (created at their first update) are ``PreallocatedLayer(capacity)``."""

    def __init__(self, capacity: int):
        super().__init__()
        self.layer_class_to_replicate = partial(PreallocatedLayer, capacity)


def plain_sampling(model, kwargs: dict, input_ids, attention_mask) -> bool:
    """A ``generate`` call of a decoder-only model on ids and a mask, one sequence per row, HF's own cache
    type and no legacy ``past_key_values``: the calls the preallocated and the shared-prefix caches apply to
    (each checks the ``cache`` argument itself). A model that is not a transformers one (no
    ``generation_config``, e.g. a composition of policies with its own ``generate``) is left alone."""
    if getattr(model, "generation_config", None) is None or getattr(model, "config", None) is None:
        return False
    config = kwargs.get("generation_config") or model.generation_config

    def setting(name):  # a generate() keyword overrides the generation config; unset (None) is HF's default
        return kwargs.get(name, getattr(config, name, None))

    return (
        input_ids is not None
        and attention_mask is not None
        and kwargs.get("past_key_values") is None
        and not any(torch.is_tensor(v) for v in kwargs.values())  # pixel values and other model inputs
        and (setting("num_beams") or 1) == 1
        and (setting("num_return_sequences") or 1) == 1
        and setting("cache_implementation") is None
        and not model.config.is_encoder_decoder
    )


def generation_capacity(model, kwargs: dict, input_ids: torch.Tensor) -> int | None:
    """Positions a ``generate`` call can cache: prompt width + ``max_new_tokens`` (or ``max_length``)."""
    config = kwargs.get("generation_config") or model.generation_config
    new = kwargs.get("max_new_tokens", getattr(config, "max_new_tokens", None))
    if new is not None:
        return input_ids.size(1) + new
    total = kwargs.get("max_length", getattr(config, "max_length", None))
    return total if total is not None and total > input_ids.size(1) else None


def generate_with_preallocated_cache(model, generate, input_ids=None, attention_mask=None, **kwargs):
    """``generate(...)`` with an empty ``PreallocatedCache`` sized for the call when it applies (see the module
    docstring), else ``generate`` unchanged."""
    if kwargs.get("cache") is None and plain_sampling(model, kwargs, input_ids, attention_mask):
        capacity = generation_capacity(model, kwargs, input_ids)
        if capacity is not None:
            kwargs["cache"] = PreallocatedCache(capacity)
    return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


@contextmanager
def wrapped_generate(model, wrapper):
    """Within the block, ``model.generate(*args, **kwargs)`` is ``wrapper(model, generate, *args, **kwargs)``
    with ``generate`` the one it replaced (an instance attribute over the class's method, removed on exit;
    an instance-level generate set by someone else is restored)."""
    own = model.__dict__.get("generate")
    plain = model.generate
    model.generate = lambda *args, **kwargs: wrapper(model, plain, *args, **kwargs)
    try:
        yield model
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own


def preallocated_generation(model):
    """Within the block, ``model.generate`` caches keys and values in preallocated buffers. Entered after
    ``shared_prefix_generation``, whose prefill then fills this cache."""
    return wrapped_generate(model, generate_with_preallocated_cache)
