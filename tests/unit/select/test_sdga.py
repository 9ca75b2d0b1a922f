"""CuSearch's Search-Depth Greedy Allocation (seed 004 #27) worked by hand: which trajectories of a batch
the update budget goes to, SDGA-Auto (always the deepest) and SDGA-Phase (a threshold that advances)."""

from __future__ import annotations

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.select.none import KeepAll
from rlpost.select.sdga_auto import SdgaAuto, allocate, search_depths
from rlpost.select.sdga_phase import SdgaPhase

#        row:   0  1  2  3  4  5  6  7
CALLS = [0, 2, 1, 4, 1, 0, 2, 2]  # tool calls made
ERRORS = [0, 0, 0, 1, 0, 0, 0, 1]  # of which malformed
# depth = calls - errors = [0, 2, 1, 3, 1, 0, 2, 1]


def batch(calls=CALLS, errors=ERRORS) -> GroupBatch:
    rows = [{"rlpost_env_tool_calls": c, "rlpost_env_tool_errors": e} for c, e in zip(calls, errors)]
    n = len(rows)
    return GroupBatch(
        rewards=torch.zeros(n),
        reward_terms=torch.zeros(n, 1),
        term_names=["env"],
        num_generations=4,
        completion_mask=torch.ones(n, 3),
        completion_ids=torch.zeros(n, 3, dtype=torch.long),
        rows=rows,
    )


def test_depth_is_the_parsed_tool_calls():
    assert search_depths(batch().rows).tolist() == [0, 2, 1, 3, 1, 0, 2, 1]
    with pytest.raises(ValueError, match="search depth needs episodes"):
        search_depths([{"question": "q"}])


def test_allocate_keeps_the_highest_scores_and_breaks_ties_at_random():
    score = torch.tensor([0.0, 2, 1, 3, 1, 0, 2, 1])
    seen_ties = set()
    for seed in range(20):
        keep = allocate(score, 4, torch.Generator().manual_seed(seed))
        assert keep.sum() == 4 and keep[[1, 3, 6]].tolist() == [1, 1, 1]  # depths 3, 2, 2 always
        tie = [i for i in (2, 4, 7) if keep[i] == 1]  # one of the three depth-1 rows fills the last slot
        assert len(tie) == 1
        seen_ties.add(tie[0])
    assert seen_ties == {2, 4, 7}  # each tied row gets its turn: no bias toward the first rows


def test_sdga_auto_spends_half_the_batch_on_the_deepest_searches():
    auto = SdgaAuto(SdgaAuto.Config(budget=0.5))
    keep, metrics = auto(batch())
    assert keep.sum() == 4 and keep[[1, 3, 6]].tolist() == [1, 1, 1]
    # kept depths 3 + 2 + 2 + 1 = 8 over 4 rows; the batch's 10 over 8 rows
    assert metrics == {"depth_mean": 10 / 8, "kept_depth_mean": 2.0, "kept_fraction": 0.5}
    assert auto.state_dict() == {"batches": 1}  # the tie-break seed moved on
    budget = SdgaAuto(SdgaAuto.Config(budget=0.3))(batch())[0]  # round(0.3 * 8) = 2: depths 3 and one 2
    assert budget.sum() == 2 and budget[3] == 1 and budget[[1, 6]].sum() == 1


def test_sdga_phase_prefers_rows_at_the_threshold_and_advances_when_deeper_ones_abound():
    phase = SdgaPhase(SdgaPhase.Config(budget=0.5, start_depth=1, abundance=1.0))
    keep, metrics = phase(batch())
    # tau = 1: 6 rows are >= 1 deep (1, 2, 3, 4, 6, 7); 4 of them at random, none of the depth-0 rows
    assert keep.sum() == 4 and keep[[0, 5]].sum() == 0 and metrics["threshold"] == 1.0
    # advance rule: #(depth >= 2) = 3 (rows 1, 3, 6) < abundance 1.0 x budget 4: tau stays
    assert phase.threshold == 1
    eager = SdgaPhase(SdgaPhase.Config(budget=0.5, start_depth=1, abundance=0.75))
    eager(batch())
    assert eager.threshold == 2  # 3 >= 0.75 x 4
    keep, metrics = eager(batch())  # tau = 2: rows 1, 3, 6 first, then one of the five shallower rows
    assert metrics["threshold"] == 2.0 and keep[[1, 3, 6]].tolist() == [1, 1, 1] and keep.sum() == 4
    assert eager.threshold == 2  # #(depth >= 3) = 1 < 3
    restored = SdgaPhase(SdgaPhase.Config())
    restored.load_state_dict(eager.state_dict())
    assert (restored.threshold, restored.batches) == (2, 2)


def test_none_keeps_everything():
    keep, metrics = KeepAll(KeepAll.Config())(batch())
    assert keep.tolist() == [1.0] * 8 and metrics == {}
