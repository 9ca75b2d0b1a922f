"""Rollout generation that prefills each distinct prompt once (``train.shared_prefix``).

A GRPO generation batch holds every prompt G times in a row. HF ``generate`` prefills all B rows,
so the prompt's keys and values are computed G times, identically. Here the prompt tokens but the last
run once per distinct prompt (rows with equal ids and mask), the KV cache is expanded to the B rows
(``reorder_cache``), and ``generate`` continues from that cache: its first forward runs only the last
prompt token of every row, whose logits sample the first completion token exactly as before. Positions
come from the attention mask as in HF's own prefill, and no random numbers are drawn before sampling,
so with the same seed the samples are those of plain ``generate`` unless float rounding (the prompt
runs in a smaller batch) flips one (bench/generation.py and tests/unit/generation/test_prefix_generation.py compare).

It applies to decoder-only text models with HF's default dynamic cache and one sequence per row
(sampling or greedy, no beams); anything else goes to plain ``generate`` unchanged. Cost: the prefill
of ``distinct x (S - 1)`` instead of ``B x S`` tokens (B = 8, G = 4, 45-token prompts on CPU:
0.59 s -> 0.22 s per batch).
"""

from __future__ import annotations

import torch
from transformers import DynamicCache

from rlpost.generation.kv_cache import plain_sampling, wrapped_generate

# the keywords of the prefill's model call (shared_prefix_cache): parameters of the supported models' forward,
# pinned by tests/trainer/test_internals_contract.py (the cache's members are declared in kv_cache.py)
PREFILL_KEYWORDS = ("input_ids", "attention_mask", "position_ids", "cache", "use_cache", "logits_to_keep")


def prompt_groups(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of ``ids [B, S]`` with equal ids and mask: the distinct rows ``[D, 2S]`` (ids, then mask)
    and each row's index among them ``[B]``."""
    return torch.unique(torch.cat([ids, mask.to(ids.dtype)], dim=1), dim=0, return_inverse=True)


def shared_prefix_cache(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, cache: DynamicCache | None = None
) -> DynamicCache | None:
    """KV cache of ``input_ids [B, S]`` but its last column, computed once per distinct prompt row and
    expanded to the B rows, in ``cache`` (empty) or a new ``DynamicCache``; None when no two rows share a
    prompt (nothing to save) or S < 2."""
    if input_ids.size(1) < 2:
        return None
    distinct, inverse = prompt_groups(input_ids, attention_mask)
    if distinct.size(0) == input_ids.size(0):
        return None
    width = input_ids.size(1)
    ids, mask = distinct[:, : width - 1], distinct[:, width:-1]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # HF's prefill positions for left padding
    cache = DynamicCache() if cache is None else cache
    model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True, logits_to_keep=1)
    cache.reorder_cache(inverse)  # [distinct, ...] -> [B, ...]
    return cache


def generate_with_shared_prefix(model, generate, input_ids=None, attention_mask=None, **kwargs):
    """``generate(input_ids=..., attention_mask=..., **kwargs)`` continuing from the shared prompt cache
    when it applies (see the module docstring), else ``generate`` unchanged. An empty ``cache`` passed in
    (``rlpost/generation/kv_cache.py``'s preallocated one) is the one the shared prefill fills."""
    given = kwargs.get("cache")
    applies = (given is None or given.get_seq_length() == 0) and plain_sampling(
        model, kwargs, input_ids, attention_mask
    )
    cache = shared_prefix_cache(model, input_ids, attention_mask, given) if applies else None
    if cache is not None:
        kwargs["cache"] = cache
    return generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def shared_prefix_generation(model):
    """Within the block, ``model.generate`` prefills each distinct prompt once."""
    return wrapped_generate(model, generate_with_shared_prefix)
