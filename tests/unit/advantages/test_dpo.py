"""Iterative DPO and ED-iDPO (seed 004 #30) by hand, DPO's exact gradient through the pipeline, and
algorithm=ed_idpo for 2 steps in the real trainer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from rlpost.advantages.base import GroupBatch
from rlpost.advantages.dpo import IterativeDPO, preference_pairs
from rlpost.core.errors import ConfigError
from rlpost.losses.aggregation import aggregate
from rlpost.losses.base import LossInputs
from rlpost.losses.clip import Clip

from support.trainer import make_run, rlpost_trainer, step_logs


def batch(rewards, logps, ref_logps, mask, g=2) -> GroupBatch:
    mask = torch.tensor(mask, dtype=torch.float32) if not torch.is_tensor(mask) else mask
    rewards = torch.as_tensor(rewards, dtype=torch.float32)
    return GroupBatch(
        rewards=rewards,
        reward_terms=rewards.unsqueeze(1),
        term_names=["r"],
        num_generations=g,
        completion_mask=mask,
        completion_ids=torch.zeros_like(mask, dtype=torch.long),
        extras={"logps": torch.as_tensor(logps), "ref_logps": torch.as_tensor(ref_logps)},
    )


def test_preference_pairs_first_best_and_worst_scorable():
    nan = float("nan")
    # group 0: best 1 at rows 0 and 2 -> first (0); worst 0 at rows 1 and 3 -> first (1)
    # group 1: all equal -> no pair; group 2: NaN ignored, best row 10 (0.9), worst row 9 (first 0.2)
    r = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.5, 0.5, 0.5, 0.5, nan, 0.2, 0.9, 0.2])
    chosen, rejected, has_pair = preference_pairs(r, 4)
    assert chosen.tolist()[::2] == [0, 10] and rejected.tolist()[::2] == [1, 9]
    assert has_pair.tolist() == [True, False, True]
    # one scorable completion is no pair
    assert preference_pairs(torch.tensor([nan, 1.0]), 2)[2].tolist() == [False]


def test_no_pair_logs_no_dpo_loss():
    tied = {**B, "rewards": [0.0, 0.0, 1.0, 1.0]}
    a, m = IterativeDPO(IterativeDPO.Config(beta=0.5, alpha=0.1))(batch(**tied))
    torch.testing.assert_close(a, torch.tensor([-0.05, -0.1, -0.05, -0.05]))  # exploration only
    assert m["dpo/pair_frac"] == 0.0 and not {"dpo/loss", "dpo/margin", "dpo/accuracy"} & m.keys()


# group 0: r = [1, 0]; S = sum_t m log pi: row 0 = -1 - 1 = -2, row 1 = -2 (second token padded)
#          S_ref: row 0 = -3, row 1 = -1 -> log-ratios +1 and -1; h = beta * (1 - (-1)) = 0.5 * 2 = 1
# group 1: r = [0, 0]: no pair, only the exploration term
B = dict(
    rewards=[1.0, 0.0, 0.0, 0.0],
    logps=[[-1.0, -1.0], [-2.0, -7.0], [-1.0, -1.0], [-1.0, -1.0]],
    ref_logps=[[-1.5, -1.5], [-1.0, -5.0], [-1.0, -1.0], [-1.0, -1.0]],
    mask=[[1, 1], [1, 0], [1, 1], [1, 1]],
)


def test_dpo_weights_by_hand():
    # weight = G * beta * sigmoid(-h) = 2 * 0.5 * sigmoid(-1) = 0.268941
    # exploration (token_mean) alpha / |y|: rows 0, 2, 3 have 2 tokens -> 0.05, row 1 has 1 -> 0.1
    a, m = IterativeDPO(IterativeDPO.Config(beta=0.5, alpha=0.1))(batch(**B))
    w = 2 * 0.5 / (1 + math.e)
    torch.testing.assert_close(a, torch.tensor([w - 0.05, -w - 0.1, -0.05, -0.05]))
    assert m["dpo/pair_frac"] == 0.5 and m["dpo/accuracy"] == 1.0
    assert m["dpo/margin"] == pytest.approx(1.0)
    assert m["dpo/loss"] == pytest.approx(math.log(1 + math.exp(-1.0)))  # -log sigmoid(1) = 0.313262
    assert m["dpo/explore_abs_mean"] == pytest.approx((0.05 * 3 + 0.1) / 4)


def test_alpha_zero_is_plain_dpo_and_sum_normalization():
    a, _ = IterativeDPO(IterativeDPO.Config(beta=0.5, alpha=0.0))(batch(**B))
    w = 2 * 0.5 / (1 + math.e)
    torch.testing.assert_close(a, torch.tensor([w, -w, 0.0, 0.0]))
    a, _ = IterativeDPO(IterativeDPO.Config(beta=0.5, alpha=0.1, normalize="sum"))(batch(**B))
    torch.testing.assert_close(a, torch.tensor([w - 0.1, -w - 0.1, -0.1, -0.1]))


def test_pipeline_gives_dpo_gradient_exactly_in_shuffled_micro_batches():
    """grad of  (1/P) sum_g -log sigmoid(h_g) + (alpha/N) sum_i S_i/|y_i|  (direct autograd) equals the
    gradient of the clip loss at ratio 1 with these weights, aggregated seq-mean-token-sum over shuffled
    micro-batches that split every pair."""
    torch.manual_seed(0)
    n, t, v, g, beta, alpha = 8, 5, 7, 4, 0.3, 0.2
    logits = torch.randn(n, t, v, requires_grad=True)  # the "policy": one free logit table per completion
    tokens = torch.randint(v, (n, t))
    mask = torch.ones(n, t)
    mask[1, 3:] = 0
    mask[6, 2:] = 0
    ref = torch.randn(n, t, v).log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    rewards = torch.tensor([0.1, 0.9, 0.4, 0.9, 0.3, 0.3, 0.8, 0.3])

    def token_logps():
        return logits.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]

    logps = token_logps()
    s, s_ref, lengths = (logps * mask).sum(1), (ref * mask).sum(1), mask.sum(1)
    chosen, rejected, has_pair = preference_pairs(rewards, g)  # group 0: rows 1 vs 0; group 1: 6 vs 4
    h = beta * ((s - s_ref)[chosen] - (s - s_ref)[rejected])
    direct = -(F.logsigmoid(h) * has_pair).sum() / (n // g) + alpha * (s / lengths).mean()
    (expected,) = torch.autograd.grad(direct, logits)

    weights, _ = IterativeDPO(IterativeDPO.Config(beta=beta, alpha=alpha))(
        batch(rewards, logps.detach(), ref, mask, g=g)
    )
    clip = Clip(Clip.Config())
    for rows in ([5, 1, 2, 7], [0, 3, 6, 4]):  # 2 micro-batches (grad_accum = 2); each pair is split
        logps = token_logps()[rows]
        x = LossInputs(logps=logps, old_logps=logps.detach(), advantages=weights[rows].unsqueeze(1), mask=mask[rows])
        per_token, _ = clip(x)
        aggregate(per_token, mask[rows], "seq-mean-token-sum", grad_accum=2).backward()
    torch.testing.assert_close(logits.grad, expected)


def test_refused_without_its_loss_and_aggregation_or_with_a_moving_policy():
    with pytest.raises(ConfigError, match=r"loss=clip, aggregation=seq-mean-token-mean.*algorithm=ed_idpo"):
        make_run(["algorithm/advantage=dpo"])
    with pytest.raises(ConfigError, match="loss=cispo"):
        make_run(["algorithm=ed_idpo", "algorithm/loss=cispo"])
    for key in ("train.num_iterations=2", "train.minibatches=2"):
        with pytest.raises(ConfigError, match="must not move within a generation batch"):
            make_run(["algorithm=ed_idpo", key])


@pytest.mark.parametrize("sync_every", [1, 5])
def test_ed_idpo_trains_two_steps(tmp_path, sync_every):
    """Step 1: the reference is the initial policy, which sampled the rollout: every margin is 0 and the
    DPO loss is ln 2. Step 2: with ref_sync_every=1 the reference moved to the policy again (margin 0),
    with 5 it is still the initial model and the moved policy gives a nonzero margin."""
    overrides = ["algorithm=ed_idpo", "train.steps=2", f"algorithm.kl.ref_sync_every={sync_every}"]
    trainer = rlpost_trainer(make_run(overrides), tmp_path)
    assert trainer.run.needs_reference and trainer.run.algorithm.aggregation == "seq-mean-token-sum"
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train()
    assert any(not torch.equal(b, p) for b, p in zip(before, trainer.model.parameters()))
    first, second = step_logs(trainer)
    for log in (first, second):
        assert log["rlpost/dpo/pair_frac"] > 0 and log["rlpost/dpo/explore_abs_mean"] > 0
        assert math.isfinite(log["loss"])
    assert first["rlpost/dpo/margin"] == pytest.approx(0.0, abs=1e-4)
    assert first["rlpost/dpo/loss"] == pytest.approx(math.log(2), abs=1e-4)
    if sync_every == 1:
        assert second["rlpost/dpo/margin"] == pytest.approx(0.0, abs=1e-4)
    else:
        assert abs(second["rlpost/dpo/margin"]) > 1e-3
