"""ED-GRPO (seed 004 #30) by hand, and algorithm=ed_grpo for 2 steps in the real trainer."""

from __future__ import annotations

import pytest
import torch

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.ed import ExplorationDriven, surprisal

from support.trainer import make_run, rlpost_trainer, step_logs


def batch(rewards, logps, mask) -> GroupBatch:
    mask = torch.tensor(mask, dtype=torch.float32)
    return GroupBatch(
        rewards=torch.tensor(rewards),
        reward_terms=torch.tensor(rewards).unsqueeze(1),
        term_names=["r"],
        num_generations=2,
        completion_mask=mask,
        completion_ids=torch.zeros_like(mask, dtype=torch.long),
        extras={"logps": torch.tensor(logps)},
    )


# group 0: r = [1, 0], logps [[-1, -3], [-0.5, (pad)]]  -> surprisal s = [2, 0.5]
# group 1: r = [0, 0], logps [[-1, -1], [-2, -2]]       -> s = [1, 2]
B = dict(
    rewards=[1.0, 0.0, 0.0, 0.0],
    logps=[[-1.0, -3.0], [-0.5, -9.0], [-1.0, -1.0], [-2.0, -2.0]],
    mask=[[1, 1], [1, 0], [1, 1], [1, 1]],
)


def test_surprisal_token_mean_and_sum():
    x = batch(**B)
    assert surprisal(x.extras["logps"], x.completion_mask).tolist() == [2.0, 0.5, 1.0, 2.0]
    assert surprisal(x.extras["logps"], x.completion_mask, "sum").tolist() == [4.0, 0.5, 2.0, 4.0]


def test_ed_advantage_by_hand():
    # GRPO: group 0 mean 0.5, unbiased std sqrt(0.5) = 0.707107 -> A = +-0.5 / (0.707107 + 1e-4) = +-0.707007
    #       group 1 all equal -> A = 0
    # bonus = alpha * (s - mean_group(s)): group 0: 0.1 * [0.75, -0.75]; group 1: 0.1 * [-0.5, 0.5]
    a, m = ExplorationDriven(ExplorationDriven.Config(alpha=0.1))(batch(**B))
    grpo = 0.5 / (0.5**0.5 + 1e-4)
    torch.testing.assert_close(a, torch.tensor([grpo + 0.075, -grpo - 0.075, -0.05, 0.05]))
    assert m["ed/bonus_abs_mean"] == pytest.approx((0.075 * 2 + 0.05 * 2) / 4)
    assert m["ed/surprisal_mean"] == pytest.approx(5.5 / 4)


def test_alpha_zero_is_grpo_and_nan_rewards_get_no_bonus():
    a, _ = ExplorationDriven(ExplorationDriven.Config(alpha=0.0))(batch(**B))
    grpo = 0.5 / (0.5**0.5 + 1e-4)
    torch.testing.assert_close(a, torch.tensor([grpo, -grpo, 0.0, 0.0]))
    # row 2 unscorable: group 1's bonus is centred over row 3 alone -> 0, and row 2 gets none
    a, _ = ExplorationDriven(ExplorationDriven.Config())(
        batch(rewards=[1.0, 0.0, float("nan"), 0.0], logps=B["logps"], mask=B["mask"])
    )
    assert a[2:].tolist() == [0.0, 0.0]


def test_ed_grpo_bundle_trains_two_steps(tmp_path):
    trainer = rlpost_trainer(
        make_run(["algorithm=ed_grpo", "train.steps=2", "algorithm.advantage.alpha=0.5"]), tmp_path
    )
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    logs = step_logs(trainer)
    assert len(logs) == 2 and trainer.run.algorithm.name == "ed_grpo"
    for log in logs:
        assert log["rlpost/ed/bonus_abs_mean"] > 0 and torch.isfinite(torch.tensor(log["loss"]))
        assert log["rlpost/ed/surprisal_mean"] > 5  # a tiny random model over a 49k vocabulary: ~ln(49152) = 10.8


def test_ed_grpo_reuses_trls_behaviour_logprobs(tmp_path):
    """num_iterations=2: TRL already scored the rollout without grad (old_per_token_logps); ED's surprisal
    reads exactly those and rlpost runs no second no-grad forward."""
    trainer = rlpost_trainer(make_run(["algorithm=ed_grpo", "train.steps=2", "train.num_iterations=2"]), tmp_path)
    forwards, seen = [], []
    sampling_logps, rollout_statistics = trainer._sampling_logps, trainer._rollout_statistics
    trainer._sampling_logps = lambda *a, **kw: forwards.append(1) or sampling_logps(*a, **kw)

    def statistics(output):
        stats = rollout_statistics(output)
        seen.append((stats["logps"], trainer._gather_padded(output["old_per_token_logps"])))
        return stats

    trainer._rollout_statistics = statistics
    trainer.train()
    assert forwards == [] and len(seen) == 1  # one generation batch feeds both passes
    torch.testing.assert_close(seen[0][0], seen[0][1])
    assert step_logs(trainer)[0]["rlpost/ed/surprisal_mean"] > 5
