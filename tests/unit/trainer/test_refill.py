"""DAPO's refill helpers (rlpost/trainer/refill.py) on hand-made tensors; the trainer path is in
tests/trainer/test_trainer_options.py."""

from __future__ import annotations

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.trainer.refill import fill_plan, merge_rows, refill_indices


def test_fill_plan_pairs_dropped_slots_with_informative_groups_inside_each_process():
    kept = torch.tensor([True, False, False, True, False, True])  # 6 groups, 3 per process
    informative = torch.tensor([True, False, True, False, False, True])
    # process 0 (groups 0-2): dropped 1, 2; donors 0, 2 -> (1, 0), (2, 2)
    # process 1 (groups 3-5): dropped 4; donor 5 -> (4, 5)
    assert fill_plan(kept, informative, 3) == [(1, 0), (2, 2), (4, 5)]
    # one process: every donor is usable; more dropped slots than donors leaves the rest dropped
    assert fill_plan(kept, torch.tensor([False, False, False, False, False, True]), 6) == [(1, 5)]


def test_merge_rows_pads_prompts_left_and_completions_right():
    output = {
        "prompt_ids": torch.tensor([[9, 1], [9, 2]]),  # B = 2, left-padded prompts of width 2
        "prompt_mask": torch.tensor([[0, 1], [0, 1]]),
        "completion_ids": torch.tensor([[5], [6]]),  # completions of width 1
        "advantages": torch.tensor([0.0, 0.0]),
        "num_items_in_batch": torch.tensor(2),  # a scalar: kept
        "old_per_token_logps": None,
    }
    extra = {
        "prompt_ids": torch.tensor([[3, 4, 5], [7, 8, 1]]),  # width 3
        "prompt_mask": torch.tensor([[1, 1, 1], [1, 1, 1]]),
        "completion_ids": torch.tensor([[1, 2, 3], [4, 5, 6]]),  # width 3
        "advantages": torch.tensor([0.5, -0.5]),
        "num_items_in_batch": torch.tensor(6),
        "old_per_token_logps": None,
    }
    merged = merge_rows(output, extra, [(1, 0)], pad_id=9)  # row 1 <- extra row 0
    assert merged["prompt_ids"].tolist() == [[9, 9, 1], [3, 4, 5]]  # row 0 padded on the left with pad_id
    assert merged["prompt_mask"].tolist() == [[0, 0, 1], [1, 1, 1]]
    assert merged["completion_ids"].tolist() == [[5, 0, 0], [1, 2, 3]]  # row 0 padded on the right with 0
    assert merged["advantages"].tolist() == [0.0, 0.5]
    assert merged["num_items_in_batch"].item() == 2 and merged["old_per_token_logps"] is None
    assert output["advantages"].tolist() == [0.0, 0.0]  # the input is not changed in place
    assert merge_rows(output, extra, [], pad_id=9) is output


def test_refill_draws_are_distinct_seeded_and_differ_by_round():
    a = refill_indices(100, 8, seed=0, step=3, round_=1)
    assert len(set(a)) == 8 and all(0 <= i < 100 for i in a)
    assert a == refill_indices(100, 8, seed=0, step=3, round_=1)  # the same on every process and on resume
    assert a != refill_indices(100, 8, seed=0, step=3, round_=2)
    assert len(refill_indices(3, 8, seed=0, step=0, round_=1)) == 8  # a dataset smaller than a round repeats rows


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["algorithm=ppo", "algorithm.dynamic_sampling=true", "algorithm.max_refill_rounds=2"], "a PPO critic"),
        (["algorithm=dapo", "logging.replay=true"], "logging.replay=true cannot be combined"),
        (
            ["algorithm=dapo", "hardware.num_processes=2", "train.completions_per_step=12", "train.num_generations=4"],
            "each of the 2 processes holds 6 completions",
        ),
    ],
)
def test_refill_refusals_name_the_keys(overrides, reason):
    with pytest.raises(ConfigError, match=reason):
        build_run(compose(["algorithm.overlong.cache_len=4", *overrides]))
    assert build_run(compose(["algorithm=dapo"])).algorithm.max_refill_rounds == 2  # DAPO refills by default


def test_refill_does_nothing_without_dynamic_sampling():
    # the dapo bundle's refill setting stays harmless when dynamic sampling is switched off (TRL-equivalence runs do)
    run = build_run(compose(["algorithm=dapo", "algorithm.dynamic_sampling=false", "algorithm.overlong.cache_len=4"]))
    assert run.algorithm.max_refill_rounds == 2 and not run.algorithm.dynamic_sampling
