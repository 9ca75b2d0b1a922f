"""Attention of packed rows segment by segment, instead of through one dense [L, L] mask.

A packed row (rlpost/logprobs/packing.py) is a sequence of blocks ``[prompt | run_1 | run_2 | ...]``, one per
prompt group: a prompt of p tokens, then each completion's tokens (a run). A prompt token sees the
earlier tokens of its prompt; a run token sees its whole prompt and the earlier tokens of its own run;
nothing sees another block. Through a dense block mask, scaled-dot-product attention computes all L^2
query-key pairs of the row and masks most of them away (the mask is applied, not skipped). Here it runs
once per prompt (causal, p^2 / 2 pairs) and once per run of n tokens over ``[prompt keys | its own
keys]`` (n (p + n / 2) pairs), so a group of G completions of length n costs about G n (p + n / 2)
pairs instead of (p + G n)^2, and any number of groups can share one row without padding.

Measured on SmolLM2-135M (fp32, 2 CPU cores, forward and backward of the backbone, 2 groups of 4;
bench/packed_attention.py, bench/RESULTS.md): at blocks of 160-290 tokens a row per block under dense
masks is 5-10% faster (30 layers x 10 small attention calls cost more than the pairs they skip), at
~430 the two are within 5%, from ~525 on one row with segments is 10-18% faster, and 2.1x when one
group is long and the other short (the dense rows pad the short block to the long one's length).
``train.packing_segment_min_tokens`` (default 512) picks the layout by the longest block.

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
# What this module relies on in transformers, in one place (tests/trainer/test_internals_contract.py pins each against
# the installed transformers and fails on a transformers name or patch used here but not declared):
PATCHES = ("PreTrainedConfig._attn_implementation",)  # set to NAME for the call (a property with a setter)
REGISTRIES = ("AttentionInterface.register", "AttentionMaskInterface.register")  # global: classmethods (key, value)
# how transformers' attention modules call the function registered under NAME: these five positionally, then
# dropout= and scaling= (and **kwargs); ``attention`` takes them so and hands them to sdpa_attention_forward in order
CALLED_WITH = ("module", "query", "key", "value", "attention_mask", "dropout", "scaling")
# other keywords supported models pass (taken by **kwargs, handed on to SDPA outside the context): Qwen2's
# sliding_window, None on its full-attention layers (the segment path does not model sliding windows)
OTHER_KEYWORDS = ("sliding_window",)


@dataclass(frozen=True)
class Block:
    """One prompt group in a packed row: its prompt's ``(start, end)`` columns, then each completion run's."""

    prompt: tuple[int, int]
    runs: tuple[tuple[int, int], ...]

    @property
    def end(self) -> int:
        """The column after the block's last token."""
        return self.runs[-1][1] if self.runs else self.prompt[1]

    def shifted(self, offset: int) -> Block:
        """The same block placed ``offset`` columns further right."""
        start, end = self.prompt
        return Block((start + offset, end + offset), tuple((a + offset, b + offset) for a, b in self.runs))


Row = tuple[Block, ...]  # a packed row's blocks, left to right; the columns after the last one are padding

_ACTIVE: contextvars.ContextVar[list[tuple[Row, list[list[torch.Tensor]]]] | None] = contextvars.ContextVar(
    "rlpost_segments", default=None
)


def row_end(row: Row) -> int:
    """Real tokens in ``row``; the columns after them are padding slots."""
    return row[-1].end if row else 0


def attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """transformers' attention signature: ``query [D, Hq, L, dh]``, ``key``/``value [D, Hkv, L, dh]`` ->
    ``([D, L, Hq, dh], None)``. Segment by segment inside :func:`segment_attention`, SDPA outside it."""
    rows = _ACTIVE.get()
    if rows is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    length = query.size(2)
    out = []
    for d, (row, masks) in enumerate(rows):
        q, k, v = query[d], key[d], value[d]  # [H, L, dh]
        parts = []
        for block, visible in zip(row, masks):
            p0, p1 = block.prompt
            prompt_k, prompt_v = k[:, p0:p1], v[:, p0:p1]
            parts.append(
                F.scaled_dot_product_attention(
                    q[:, p0:p1], prompt_k, prompt_v, is_causal=True, scale=scaling, enable_gqa=True, dropout_p=dropout
                )
            )
            for (start, end), run_mask in zip(block.runs, visible):
                keys, values = torch.cat([prompt_k, k[:, start:end]], 1), torch.cat([prompt_v, v[:, start:end]], 1)
                parts.append(
                    F.scaled_dot_product_attention(
                        q[:, start:end],
                        keys,
                        values,
                        attn_mask=run_mask,
                        scale=scaling,
                        enable_gqa=True,
                        dropout_p=dropout,
                    )
                )
        if row_end(row) < length:  # padding slots: a zero output, never read
            parts.append(q.new_zeros(q.size(0), length - row_end(row), q.size(2)))
        out.append(torch.cat(parts, 1))
    return torch.stack(out).transpose(1, 2).contiguous(), None


def _register() -> None:
    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # calls outside the context build SDPA's masks


@contextlib.contextmanager
def segment_attention(config, rows: list[Row], device: torch.device) -> Iterator[torch.Tensor]:
    """Run the backbone of ``config`` with segment attention over ``rows``; yields the placeholder mask
    ``[D, 1, 1, 1]`` to pass as its ``attention_mask``."""
    _register()

    def run_mask(p: int, n: int) -> torch.Tensor:  # [n, p + n]: the whole prompt, then its own run causally
        return torch.ones(n, p + n, dtype=torch.bool, device=device).tril(p)

    masks = [[[run_mask(b.prompt[1] - b.prompt[0], end - start) for start, end in b.runs] for b in row] for row in rows]
    token = _ACTIVE.set(list(zip(rows, masks)))
    previous, config._attn_implementation = config._attn_implementation, NAME
    try:
        yield torch.ones(len(rows), 1, 1, 1, dtype=torch.bool, device=device)
    finally:
        config._attn_implementation = previous
        _ACTIVE.reset(token)
