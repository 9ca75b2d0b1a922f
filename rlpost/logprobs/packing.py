"""Packed training forward: each prompt group in one row, no padding tokens run (``train.packing``).

A GRPO micro-batch ``ids [B, S]`` holds every prompt G times, left-padded to the prompt width P, and
every completion right-padded to T = S - P after its EOS. The padded forward runs B x S tokens; the
shared-prefix forward (rlpost/trainer/logprobs.py) runs each prompt once but still B x T completion
tokens. Here each distinct prompt and its completions become one block of real tokens only:

    block d = [prompt_d | completion_1[:-1] | completion_2[:-1] | ...]     (no pads between them)

Every token keeps the position of its column in the padded layout (what the padded forward gives it),
and attention lets it see exactly what it sees there: a prompt token the earlier prompt tokens, a
completion token its own prompt and the earlier tokens of its own completion. The last token of a
completion is not run (it predicts nothing), the last prompt token's hidden state predicts each
completion's first token.

Two layouts, chosen by the longest block (``train.packing_segment_min_tokens``):

- Short blocks (the default CPU job: 8 completions of up to 32 tokens, 2 prompts of 45, ~264 backbone
  tokens instead of ~338 with the shared prefix and 608 padded): one row per block, padded to the
  longest, under a dense [D, 1, L, L] block mask. A padding slot attends to itself only (no fully masked
  softmax row, whose NaN would poison the backward). The mask is applied, not skipped, so all L^2 pairs
  are computed, but it is one attention call per layer.
- Long blocks: every block in one row, back to back, no padding at all, attending segment by segment
  (rlpost/logprobs/segment_attention.py: each prompt once, each completion over its prompt and itself). A batch
  with one long group and one short one then runs its real tokens only, where one row per block would
  pad the short one to the long one's length.

A block longer than ``train.packing_max_tokens`` makes the batch fall back to the shared-prefix forward;
so does a batch whose masks are not left-padded prompts and right-padded completions, or an attention
implementation that takes no 4D mask (flash, flex).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate

import torch

from rlpost.generation.prefix_generation import prompt_groups
from rlpost.logprobs.segment_attention import Block, Row, row_end, segment_attention

MASKED_ATTENTION = ("sdpa", "eager")  # implementations that take a custom 4D mask


@dataclass(frozen=True)
class Packing:
    """How the log-prob forward packs (``train.packing_max_tokens``, ``train.packing_segment_min_tokens``)."""

    max_tokens: int  # longest block (a prompt and its completions); a longer one: the shared-prefix forward
    segment_min_tokens: int  # from this block length on: one row, segment attention; below: dense block masks


@dataclass
class PackedBatch:
    """The packed rows of a micro-batch and where each target's predicting hidden state sits in them."""

    ids: torch.Tensor  # [D, L] token ids, D = distinct prompts
    positions: torch.Tensor  # [D, L] the column of each token in the padded layout
    rows: list[Row]  # [D] each row's blocks: a prompt's columns, then its completion runs'
    source: torch.Tensor  # [n] flat index into [D * L] of the hidden state predicting each real target
    segmented: bool  # attend segment by segment (one row) rather than through ``attention``

    @property
    def attention(self) -> torch.Tensor:
        """[D, 1, L, L] bool, True = may attend: a prompt token the earlier prompt tokens, a run token the
        prompt and the earlier tokens of its run, a padding slot itself only (no fully masked softmax row,
        whose NaN would poison the backward)."""
        length, device = self.ids.size(1), self.ids.device
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        visible = torch.zeros(len(self.rows), 1, length, length, dtype=torch.bool, device=device)
        for d, row in enumerate(self.rows):
            for block in row:
                p0, p1 = block.prompt
                visible[d, 0, p0:p1, p0:p1] = causal[: p1 - p0, : p1 - p0]
                for start, end in block.runs:
                    visible[d, 0, start:end, p0:p1] = True
                    visible[d, 0, start:end, start:end] = causal[: end - start, : end - start]
            pads = torch.arange(row_end(row), length, device=device)
            visible[d, 0, pads, pads] = True
        return visible


def pack_groups(ids: torch.Tensor, mask: torch.Tensor, logits_to_keep: int, packing: Packing) -> PackedBatch | None:
    """Pack ``ids [B, S]`` (prompt width ``S - logits_to_keep``) by prompt group; None when it cannot or
    should not (layout not left-padded prompt + right-padded completion, a block over ``max_tokens``)."""
    width = ids.size(1)
    prompt_width = width - logits_to_keep
    if prompt_width < 1 or logits_to_keep < 1:
        return None
    mask = mask.bool()
    prompt_mask, completion_mask = mask[:, :prompt_width], mask[:, prompt_width:]
    left_padded = (prompt_mask[:, 1:] >= prompt_mask[:, :-1]).all() and prompt_mask[:, -1].all()
    right_padded = (completion_mask[:, 1:] <= completion_mask[:, :-1]).all()
    if not (left_padded and right_padded):
        return None
    _, group = prompt_groups(ids[:, :prompt_width], prompt_mask)  # [B] group of each row
    lengths = completion_mask.sum(1).tolist()  # real completion tokens per row

    blocks = []  # per group: token ids, positions, its Block and its rows' target sources, from column 0
    for d in range(int(group.max()) + 1):
        members = (group == d).nonzero().flatten().tolist()
        prompt_cols = prompt_mask[members[0]].nonzero().flatten()
        tokens, cols, runs, sources = [ids[members[0], prompt_cols]], [prompt_cols], [], {}
        offset, last_prompt = prompt_cols.numel(), prompt_cols.numel() - 1
        for b in members:
            run = torch.arange(prompt_width, prompt_width + max(lengths[b] - 1, 0), device=ids.device)
            tokens.append(ids[b, run])
            cols.append(run)
            if run.numel():
                runs.append((offset, offset + run.numel()))
            # target k of row b is predicted by the last prompt token (k = 0) or completion token k - 1
            sources[b] = [last_prompt, *range(offset, offset + run.numel())][: lengths[b]]
            offset += run.numel()
        blocks.append((torch.cat(tokens), torch.cat(cols), Block((0, prompt_cols.numel()), tuple(runs)), sources))

    longest = max(block[0].numel() for block in blocks)
    if longest > packing.max_tokens:
        return None
    segmented = longest >= packing.segment_min_tokens
    if segmented:  # every block in one row, back to back
        sizes = [block[0].numel() for block in blocks]
        places, count, length = [(0, start) for start in accumulate(sizes[:-1], initial=0)], 1, sum(sizes)
    else:  # a row per block, padded to the longest
        places, count, length = [(d, 0) for d in range(len(blocks))], len(blocks), longest
    packed_ids = ids.new_zeros(count, length)
    positions = torch.zeros_like(packed_ids)
    placed: list[list[Block]] = [[] for _ in range(count)]
    source_of: dict[int, list[int]] = {}  # batch row -> flat indices into [count * length]
    for (tokens, cols, block, sources), (row, start) in zip(blocks, places):
        packed_ids[row, start : start + tokens.numel()] = tokens
        positions[row, start : start + tokens.numel()] = cols
        placed[row].append(block.shifted(start))
        for b, idx in sources.items():
            source_of[b] = [row * length + start + i for i in idx]
    source = torch.tensor([i for b in range(ids.size(0)) for i in source_of[b]], device=ids.device)
    return PackedBatch(packed_ids, positions, [tuple(row) for row in placed], source, segmented)


def packed_hidden(backbone, packed: PackedBatch, completion_mask: torch.Tensor) -> torch.Tensor:
    """Hidden states [B, T, H] predicting each completion target (zero where ``completion_mask`` is 0),
    from one forward of the packed rows."""
    if packed.segmented:
        with segment_attention(backbone.config, packed.rows, packed.ids.device) as placeholder:
            hidden = backbone(
                input_ids=packed.ids, attention_mask=placeholder, position_ids=packed.positions, use_cache=False
            ).last_hidden_state  # [D, L, H]
    else:
        attention = packed.attention
        if backbone.config._attn_implementation == "eager":  # additive float mask
            dtype = backbone.dtype
            attention = torch.zeros(attention.shape, dtype=dtype, device=attention.device).masked_fill(
                ~attention, torch.finfo(dtype).min
            )
        hidden = backbone(
            input_ids=packed.ids, attention_mask=attention, position_ids=packed.positions, use_cache=False
        ).last_hidden_state  # [D, L, H]
    picked = hidden.reshape(-1, hidden.size(-1)).index_select(0, packed.source)  # [n, H], row-major targets
    full = hidden.new_zeros(*completion_mask.shape, hidden.size(-1))
    return full.masked_scatter(completion_mask.bool()[..., None], picked)
