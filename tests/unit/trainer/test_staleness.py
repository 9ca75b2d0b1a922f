"""train.staleness's FIFO (rlpost/trainer/staleness.py) by hand, its build checks and its line in rlpost show; the
trainer path is in tests/trainer/test_staleness_trainer.py, resume in tests/integration/test_resume.py."""

from __future__ import annotations

import pytest
import torch

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.tools.explain import explain
from rlpost.trainer.staleness import StaleBatch, StaleBatches, prefill_indices

from support.trainer import HASH_REWARD, TINY


def schedule(k: int, steps: int) -> list[tuple[str, int]]:
    """The FIFO driven as the trainer drives it: (name of the batch trained at step t, lag) for t = 1..steps.
    Prefill batches are p0..p{k-1} (generated at step 0 by the initial policy); step t generates g{t} with the
    policy after t - 1 updates (trainer.state.global_step = t - 1 while step t runs)."""
    fifo, trained = StaleBatches(k), []
    for i in range(k):
        assert fifo.filling and fifo.push(StaleBatch(0, {"name": f"p{i}"})) is None
    for t in range(1, steps + 1):
        assert not fifo.filling
        oldest = fifo.push(StaleBatch(t - 1, {"name": f"g{t}"}))
        assert oldest is not None and len(fifo) == k
        trained.append((oldest.output["name"], (t - 1) - oldest.step))
    return trained


def test_which_generation_batch_each_step_trains():
    # k = 2: two batches of the initial policy first, then each step trains on what was generated 2 steps earlier
    assert schedule(2, 5) == [("p0", 0), ("p1", 1), ("g1", 2), ("g2", 2), ("g3", 2)]
    assert schedule(1, 3) == [("p0", 0), ("g1", 1), ("g2", 1)]
    # k = 0: the batch just generated (the trainer skips the FIFO then; the arithmetic agrees)
    assert schedule(0, 3) == [("g1", 0), ("g2", 0), ("g3", 0)]
    # generation batch i (0-based, prefill first) is trained at step i + 1; the lag is min(k, t - 1)
    for k in range(5):
        assert [lag for _, lag in schedule(k, 8)] == [min(k, t - 1) for t in range(1, 9)]


def test_state_round_trip_and_refusals():
    fifo = StaleBatches(2)
    fifo.push(StaleBatch(0, {"completion_ids": torch.tensor([[1, 2]]), "num_items_in_batch": torch.tensor(2)}))
    fifo.push(StaleBatch(3, {"completion_ids": torch.tensor([[3, 4]])}))
    state = fifo.state()
    again = StaleBatches(2)
    again.load(state)
    assert [b.step for b in again.queue] == [0, 3]
    assert torch.equal(again.queue[1].output["completion_ids"], torch.tensor([[3, 4]]))
    with pytest.raises(RuntimeError, match=r"train.staleness=2, this run has train.staleness=1"):
        StaleBatches(1).load(state)
    fifo.push(StaleBatch(4, {"rows": ["not a tensor"]}))
    with pytest.raises(TypeError, match=r"cannot keep: \['rows'\]"):
        fifo.state()


def test_prefill_prompts_are_a_seeded_draw():
    draw = prefill_indices(32, 4, seed=0, index=0)
    assert draw == prefill_indices(32, 4, seed=0, index=0) and len(set(draw)) == 4 and max(draw) < 32
    assert draw != prefill_indices(32, 4, seed=0, index=1) and draw != prefill_indices(32, 4, seed=1, index=0)
    assert len(prefill_indices(3, 5, seed=0, index=0)) == 5  # a dataset smaller than the batch: repeats


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.num_iterations=2"], "train.staleness=1 and train.num_iterations=2 cannot be combined"),
        (["train.minibatches=2"], "train.staleness=1 and train.minibatches=2 cannot be combined"),
        (["algorithm=ppo"], "runs with the grpo trainer only; algorithm=ppo uses the ppo trainer: its critic's"),
        (
            ["train.staleness_anchor=behaviour", "algorithm/correction=tis"],
            "algorithm/correction=tis would weigh the same lag a second time",
        ),
    ],
)
def test_combinations_that_cannot_be_exact_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose([*TINY, HASH_REWARD, "train.staleness=1", *overrides]))


def test_a_correction_has_something_to_correct_under_staleness():
    no_copy = ["algorithm/correction=tis", "algorithm.correction.rollout_precision=null"]
    with pytest.raises(ConfigError, match="has nothing to correct"):
        build_run(compose([*TINY, HASH_REWARD, *no_copy]))
    build_run(compose([*TINY, HASH_REWARD, *no_copy, "train.staleness=1"]))  # the stale policy is the behaviour


def test_show_explains_the_lag_in_a_line():
    text = explain(build_run(compose([*TINY, HASH_REWARD, "train.staleness=2"])))
    (line,) = [line for line in text.splitlines() if line.strip().startswith("staleness")]
    assert "step t trains on the batch generated 2 steps earlier" in line
    assert "lag min(2, t-1) steps" in line and "2 batches of the initial policy are generated before step 1" in line
    assert "PPO ratio against the policy that trains it" in line
    assert "staleness" not in explain(build_run(compose([*TINY, HASH_REWARD])))
