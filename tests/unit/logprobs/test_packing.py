"""train.packing: each prompt group runs as one row of real tokens; same hidden states and gradients."""

from __future__ import annotations

import pytest
import torch

from rlpost.logprobs.packing import Packing, pack_groups
from rlpost.logprobs.segment_attention import Block, row_end
from rlpost.models.loading import load_model
from rlpost.trainer.logprobs import backbone_hidden

from support.trainer import make_run, rlpost_trainer


def _batch():
    """Rows 0-2 share a prompt left-padded by 2, row 3 has its own (6 prompt columns); 5 completion columns,
    right-padded after each row's end: completion lengths 5, 3, 0, 4. ids, mask [4, 11]."""
    torch.manual_seed(0)
    prompt = torch.randint(3, 1000, (2, 6))
    ids = torch.cat([prompt[[0, 0, 0, 1]], torch.randint(3, 1000, (4, 5))], dim=1)
    mask = torch.ones_like(ids)
    mask[:3, :2] = 0
    mask[1, -2:] = 0
    mask[2, 6:] = 0
    mask[3, -1] = 0
    return ids, mask


def test_layout_of_the_packed_rows():
    """Group 0 = prompt (4 real tokens) + row 0's first 4 + row 1's first 2 completion tokens (row 2 has none);
    group 1 = prompt (6) + row 3's first 3. Positions are padded-layout columns."""
    ids, mask = _batch()
    packed = pack_groups(ids, mask, 5, Packing(max_tokens=64, segment_min_tokens=64))
    assert not packed.segmented
    group_of_row0 = 0 if packed.ids[0, 0] == ids[0, 2] else 1
    g0, g1 = group_of_row0, 1 - group_of_row0
    assert packed.ids.shape == (2, 10)  # 4 + 4 + 2 = 10; 6 + 3 = 9 (+1 padding slot)
    assert packed.positions[g0].tolist() == [2, 3, 4, 5, 6, 7, 8, 9, 6, 7]
    assert packed.positions[g1].tolist() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 0]
    assert torch.equal(packed.ids[g0], torch.cat([ids[0, 2:6], ids[0, 6:10], ids[1, 6:8]]))
    see = packed.attention[g0, 0]  # [10, 10]
    assert see[8].tolist() == [True] * 4 + [False] * 4 + [True, False]  # row 1's first token: prompt + itself
    assert see[7].tolist() == [True] * 8 + [False] * 2  # row 0's last run token: prompt + its own 4
    assert packed.attention[g1, 0, 9].tolist() == [False] * 9 + [True]  # the padding slot sees itself only
    # the same rows as blocks: a prompt, then each completion's run (row 2's empty one has none)
    assert packed.rows[g0] == (Block(prompt=(0, 4), runs=((4, 8), (8, 10))),)
    assert packed.rows[g1] == (Block(prompt=(0, 6), runs=((6, 9),)),) and packed.rows[g1][0].end == 9
    # targets, row-major: row 0 (5), row 1 (3), row 3 (4); each predicted by the token before it
    expected = [g0 * 10 + i for i in (3, 4, 5, 6, 7)] + [g0 * 10 + i for i in (3, 8, 9)]
    expected += [g1 * 10 + i for i in (5, 6, 7, 8)]
    assert packed.source.tolist() == expected


def test_long_blocks_share_one_row_without_padding():
    """From ``segment_min_tokens`` on, the two groups' blocks go back to back in one row of 10 + 9 = 19 tokens,
    in the dense layout's row order, and each target's source moves with its block."""
    ids, mask = _batch()
    dense = pack_groups(ids, mask, 5, Packing(max_tokens=64, segment_min_tokens=64))
    packed = pack_groups(ids, mask, 5, Packing(max_tokens=64, segment_min_tokens=10))
    assert packed.segmented and packed.ids.shape == (1, 19)
    split, width = row_end(dense.rows[0]), dense.ids.size(1)  # dense row 0's real tokens come first
    assert packed.rows == [(dense.rows[0][0], dense.rows[1][0].shifted(split))]
    assert torch.equal(packed.ids[0], torch.cat([dense.ids[0, :split], dense.ids[1, : 19 - split]]))
    assert torch.equal(packed.positions[0], torch.cat([dense.positions[0, :split], dense.positions[1, : 19 - split]]))
    moved = [col if row == 0 else split + col for row, col in (divmod(s, width) for s in dense.source.tolist())]
    assert packed.source.tolist() == moved
    see = packed.attention[0, 0]  # the one row's dense mask: the second block sees nothing of the first
    assert not see[split:, :split].any() and see[split:, split:].diagonal().all()


@pytest.mark.parametrize("segment_min_tokens", [64, 0], ids=["dense masks", "one row, segment attention"])
def test_packed_forward_equals_the_padded_forward(segment_min_tokens):
    """Hidden states at every real target and the gradients of every backbone parameter: packed vs padded,
    with the rows' attention through one dense block mask and segment by segment."""
    model = load_model(make_run([]).model)
    ids, mask = _batch()
    keep = mask[:, -5:, None]

    def run(share: bool, packing: Packing | None):
        model.zero_grad()
        hidden = backbone_hidden(model.model, ids, mask, 5, share, packing)  # [4, 5, H]
        (hidden * keep).pow(2).sum().backward()
        return hidden.detach() * keep, {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    packing = Packing(max_tokens=64, segment_min_tokens=segment_min_tokens)
    (packed, packed_grads), (padded, padded_grads) = run(True, packing), run(False, None)
    assert packed.shape == padded.shape == (4, 5, model.config.hidden_size) and packed.abs().sum() > 0
    torch.testing.assert_close(packed, padded, rtol=1e-4, atol=1e-4)
    assert padded_grads.keys() == packed_grads.keys() and len(padded_grads) > 5
    for name, reference in padded_grads.items():
        torch.testing.assert_close(packed_grads[name], reference, rtol=1e-3, atol=1e-4 * reference.abs().max().item())
    assert model.config._attn_implementation == "sdpa"  # segment attention is set for the call only


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda ids, mask: mask.__setitem__((0, 3), 0), "a hole in a prompt"),
        (lambda ids, mask: mask.__setitem__((0, 7), 0), "a hole in a completion"),
    ],
)
def test_layouts_it_does_not_pack(change, why):
    ids, mask = _batch()
    change(ids, mask)
    assert pack_groups(ids, mask, 5, Packing(max_tokens=64, segment_min_tokens=64)) is None, why
    assert pack_groups(*_batch(), 5, Packing(max_tokens=9, segment_min_tokens=0)) is None  # a block of 10 > 9


def test_trainer_packs_by_default_and_refuses_a_bad_limit(tmp_path):
    from rlpost.core.errors import ConfigError
    from rlpost.launch.checks import check_hardware

    assert rlpost_trainer(make_run([]), tmp_path / "a")._packing() == Packing(max_tokens=8192, segment_min_tokens=512)
    assert rlpost_trainer(make_run(["train.packing=false"]), tmp_path / "b")._packing() is None
    with pytest.raises(ConfigError, match="train.packing_max_tokens=0 must be >= 1"):
        check_hardware(make_run(["train.packing_max_tokens=0"]))
