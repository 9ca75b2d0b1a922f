"""Segment attention of packed rows: the attention a dense block mask gives, one segment at a time."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from transformers import LlamaConfig

from rlpost.logprobs.segment_attention import NAME, Block, attention, segment_attention


class _Attention(torch.nn.Module):
    """The two attributes transformers' SDPA path reads from an attention module."""

    num_key_value_groups = 2
    is_causal = True


def _qkv():
    """query [1, 2, 6, 4] (2 heads), key and value [1, 1, 6, 4] (1 key-value head shared by both)."""
    torch.manual_seed(0)
    return torch.randn(1, 2, 6, 4), torch.randn(1, 1, 6, 4), torch.randn(1, 1, 6, 4)


def _by_hand(q, k, v, visible):
    """out[h, i] = sum_j softmax_j(q[h, i] . k[j] / sqrt(dh) over the visible j) v[j]; [L, H, dh]."""
    out = torch.zeros(q.size(1), q.size(0), q.size(2))
    for h in range(q.size(0)):
        for i in range(q.size(1)):
            cols = [j for j in range(q.size(1)) if visible(i, j)]
            scores = torch.tensor([float(q[h, i] @ k[0, j]) / math.sqrt(q.size(2)) for j in cols])
            weights = scores.softmax(0)
            out[i, h] = sum(w * v[0, j] for w, j in zip(weights, cols))
    return out


def test_each_token_attends_to_its_prompt_and_its_own_run():
    """Row = prompt (2 tokens) | run A (columns 2-3) | run B (column 4) | one padding slot (5):
    a prompt token sees the prompt causally, a run token the prompt and its own run causally, never the other
    run; the padding slot's output is zero."""
    q, k, v = _qkv()
    row = (Block(prompt=(0, 2), runs=((2, 4), (4, 5))),)
    with segment_attention(LlamaConfig(), [row], q.device):
        out, weights = attention(_Attention(), q, k, v, None, scaling=0.5)  # 0.5 = 1 / sqrt(4)
    assert weights is None and out.shape == (1, 6, 2, 4)

    def visible(i, j):
        if i < 2:
            return j <= i  # prompt: causal
        start = 2 if i < 4 else 4
        return j < 2 or start <= j <= i  # its prompt, its own run up to itself

    torch.testing.assert_close(out[0, :5], _by_hand(q[0], k[0], v[0], visible)[:5], rtol=1e-5, atol=1e-6)
    assert out[0, 5].abs().sum() == 0


def test_two_blocks_in_one_row_do_not_see_each_other():
    """Row = block 1 (prompt 0-1, run 2-3) | block 2 (prompt 4, run 5): block 2's tokens see only block 2."""
    q, k, v = _qkv()
    row = (Block(prompt=(0, 2), runs=((2, 4),)), Block(prompt=(4, 5), runs=((5, 6),)))
    with segment_attention(LlamaConfig(), [row], q.device):
        out, _ = attention(_Attention(), q, k, v, None, scaling=0.5)

    def visible(i, j):
        if i < 4:
            return j <= i  # block 1: its prompt and its one run, causally
        return 4 <= j <= i  # block 2 starts afresh at column 4

    torch.testing.assert_close(out[0], _by_hand(q[0], k[0], v[0], visible), rtol=1e-5, atol=1e-6)


def test_outside_the_context_and_in_other_threads_it_is_sdpa():
    """transformers' SDPA with its own mask, whatever the config says: a call outside ``segment_attention``,
    or from another thread while one runs, must not pick up the packed rows' segments."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v = _qkv()
    causal = torch.ones(1, 1, 6, 6, dtype=torch.bool).tril()
    expected, _ = sdpa_attention_forward(_Attention(), q, k, v, causal, scaling=0.5)
    torch.testing.assert_close(attention(_Attention(), q, k, v, causal, scaling=0.5)[0], expected)
    config, seen = LlamaConfig(), {}
    with segment_attention(config, [(Block(prompt=(0, 2), runs=((2, 6),)),)], q.device):
        assert config._attn_implementation == NAME
        thread = threading.Thread(
            target=lambda: seen.update(out=attention(_Attention(), q, k, v, causal, scaling=0.5)[0])
        )
        thread.start()
        thread.join()
    torch.testing.assert_close(seen["out"], expected)
    assert config._attn_implementation != NAME


def test_the_config_is_restored_when_the_forward_raises():
    config = LlamaConfig()
    before = config._attn_implementation
    with (
        pytest.raises(RuntimeError, match="boom"),
        segment_attention(config, [(Block((0, 1), ()),)], torch.device("cpu")),
    ):
        raise RuntimeError("boom")
    assert config._attn_implementation == before
