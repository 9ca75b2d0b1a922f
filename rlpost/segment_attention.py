"""Attention of packed rows segment by segment, instead of through one dense [L, L] mask.

A packed row (rlpost/packing.py) is ``[prompt | run_1 | run_2 | ...]``: a prompt of p tokens, then each
completion's tokens (a run). A prompt token sees the earlier prompt tokens; a run token sees the whole
prompt and the earlier tokens of its own run. Through a dense block mask, scaled-dot-product attention
computes all L^2 query-key pairs of the row and masks most of them away (the mask is applied, not
skipped). Here it runs once for the prompt (causal, p^2 / 2 pairs) and once per run of n tokens over
``[prompt keys | its own keys]`` (n (p + n / 2) pairs), so a group of G completions of length n costs
about G n (p + n / 2) pairs instead of (p + G n)^2.

Measured on SmolLM2-135M (fp32, 2 CPU cores, forward and backward of the backbone, 2 groups of 4): at rows
of about 165 tokens the dense mask is 13% faster (30 layers x 10 small attention calls cost more than
the pairs they skip), at about 300 tokens the two tie, at 450 the segments are 15% faster and at 875
14% (bench/RESULTS.md). ``train.packing_segment_min_tokens`` (default 320) picks the segments from that
row length on.

How it plugs in: the packed forward runs under :func:`segment_attention`, which points the backbone's
``config._attn_implementation`` at this module's attention function for the call and gives it the rows'
segments through a context variable (each thread sees its own; another thread running the same model
meanwhile, or any call outside the context, falls back to transformers' SDPA attention and mask).
The backbone gets a 4D placeholder mask, which transformers passes through unchanged; the keys and
values arrive after rotary embedding, so positions are the packed rows' own. What it does not model:
sliding-window attention and logit soft-capping (the dense packed path does not either).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "rlpost_segments"  # the attention implementation name registered with transformers


@dataclass(frozen=True)
class RowSegments:
    """One packed row: ``prompt`` tokens first, then each completion run as ``(start, end)`` columns."""

    prompt: int
    runs: tuple[tuple[int, int], ...]

    @property
    def end(self) -> int:
        """Real tokens in the row; the columns after them are padding slots."""
        return self.runs[-1][1] if self.runs else self.prompt


_ACTIVE: contextvars.ContextVar[list[tuple[RowSegments, list[torch.Tensor]]] | None] = contextvars.ContextVar(
    "rlpost_segments", default=None
)


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention signature: ``query [D, Hq, L, dh]``, ``key``/``value [D, Hkv, L, dh]`` ->
    ``([D, L, Hq, dh], None)``. Segment by segment inside :func:`segment_attention`, SDPA outside it."""
    rows = _ACTIVE.get()
    if rows is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    length = query.size(2)
    out = []
    for d, (row, masks) in enumerate(rows):
        q, k, v, p = query[d], key[d], value[d], row.prompt  # [H, L, dh]
        parts = [
            F.scaled_dot_product_attention(
                q[:, :p], k[:, :p], v[:, :p], is_causal=True, scale=scaling, enable_gqa=True, dropout_p=dropout
            )
        ]
        for (start, end), visible in zip(row.runs, masks):
            keys, values = torch.cat([k[:, :p], k[:, start:end]], 1), torch.cat([v[:, :p], v[:, start:end]], 1)
            parts.append(
                F.scaled_dot_product_attention(
                    q[:, start:end], keys, values, attn_mask=visible, scale=scaling, enable_gqa=True, dropout_p=dropout
                )
            )
        if row.end < length:  # padding slots: a zero output, never read
            parts.append(q.new_zeros(q.size(0), length - row.end, q.size(2)))
        out.append(torch.cat(parts, 1))
    return torch.stack(out).transpose(1, 2).contiguous(), None


def _register() -> None:
    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # calls outside the context build SDPA's masks


@contextlib.contextmanager
def segment_attention(config, rows: list[RowSegments], device: torch.device) -> Iterator[torch.Tensor]:
    """Run the backbone of ``config`` with segment attention over ``rows``; yields the placeholder mask
    ``[D, 1, 1, 1]`` to pass as its ``attention_mask``."""
    _register()
    masks = [
        [
            torch.ones(end - start, row.prompt + end - start, dtype=torch.bool, device=device).tril(row.prompt)
            for start, end in row.runs
        ]
        for row in rows
    ]  # per run [n, p + n]: the whole prompt, then its own tokens causally
    token = _ACTIVE.set(list(zip(rows, masks)))
    previous, config._attn_implementation = config._attn_implementation, NAME
    try:
        yield torch.ones(len(rows), 1, 1, 1, dtype=torch.bool, device=device)
    finally:
        config._attn_implementation = previous
        _ACTIVE.reset(token)
