"""ICRL's self-critique rollout (rlpost/rollouts/self_critique.py) through the real RLPostTrainer (tiny model, 2
steps): critiques sampled under the critic prompt and trained there, refinements sampled under (x, y0, c) and
trained under x with their calibration weights, critic rows with their own role-wise advantages."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlpost.rollouts.self_critique import CRITIC, REFINED, critic_advantages, critic_rewards, layout

from support.rollouts import data_files, logged, original_prompt_ids, train, unpadded

G, K = 6, 2  # 2 natural, 2 critic, 2 refined rows per group


def test_self_critique_trains_solver_and_critic_roles(tmp_path, generate_calls):
    trainer = train(
        [*data_files(tmp_path), "algorithm/rollout=self_critique", f"train.num_generations={G}",
         f"train.completions_per_step={2 * G}", "algorithm.rollout.ratio_level=token",
         "algorithm.rollout.ratio_low=0.5", "algorithm.rollout.ratio_high=1.0"],
        tmp_path,
    )  # fmt: skip
    strategy, b = trainer.run.algorithm.rollout, trainer.batches[-1]
    assert b["kinds"] == layout(G, K) * 2
    prompts = [json.dumps(p) for call, _ in generate_calls for p in call]
    for i, kind in enumerate(b["kinds"]):
        x = b["rows"][i]["prompt"]
        ids = unpadded(b["prompt_ids"][i], b["prompt_mask"][i])
        attempt = b["texts"][i - i % G]  # every critique is of its group's first natural rollout
        if kind == CRITIC:  # trained under the critic prompt it was sampled from: the task and the attempt
            assert ids != original_prompt_ids(trainer, x)
            assert ids == original_prompt_ids(trainer, strategy.critic_prompt(x, attempt))
        else:
            assert ids == original_prompt_ids(trainer, x)  # natural and refined rows: under x
        if kind == REFINED:  # sampled under (x, attempt, critique j)
            critique = b["texts"][i - K].strip()[:400] or "(none)"
            asked = [*x, {"role": "assistant", "content": attempt}]  # x, the attempt, then the critique turn
            assert any(p.startswith(json.dumps(asked)[:-1]) and json.dumps(critique)[1:-1] in p for p in prompts)
    # the rewards: critic rows left the solver group (NaN), the solvers' rewards are the hash reward of their text
    rewards = b["rewards"]
    critic_rows = torch.tensor([k == CRITIC for k in b["kinds"]])
    assert torch.isnan(rewards[critic_rows]).all() and torch.isfinite(rewards[~critic_rows]).all()
    terms = b["terms"][:, 0]
    # the critic advantages in the loss batch are the role-wise ones of R(y1) - R(y0), recomputed from the terms
    expected = critic_advantages(critic_rewards(terms, G, K), G, K, 1e-4)
    adv = b["advantages"]
    assert adv.dim() == 2
    assert torch.allclose(adv[critic_rows, 0], expected[critic_rows], atol=1e-5)
    assert (adv[critic_rows] != 0).any()
    # solver rows: group_norm over the 4 solver rows of each group (critic rows out), refined ones times w_t
    solver = terms.view(2, G)[:, [0, 1, 4, 5]]
    a = (solver - solver.mean(1, keepdim=True)) / (solver.std(1, keepdim=True) + 1e-4)
    for g in range(2):
        for j, col in enumerate([0, 1, 4, 5]):
            i, mask = g * G + col, b["completion_mask"][g * G + col].bool()
            row = adv[i][mask]
            if b["kinds"][i] == REFINED:
                w = torch.tensor(strategy._weights[i])
                assert ((w >= 0.5) & (w <= 1.0)).all()
                assert torch.allclose(row, a[g, j] * w, atol=1e-4)
            else:
                assert torch.allclose(row, a[g, j].expand_as(row), atol=1e-4)
    for key in ("critic_reward_mean", "improvement_rate", "attempt_reward_mean", "refined_reward_mean"):
        assert all(math.isfinite(v) for v in logged(trainer, f"rlpost/self_critique/{key}"))
    ratio = logged(trainer, "rlpost/rollout/self_critique/ratio_mean")
    assert all(0.5 <= v <= 1.0 for v in ratio)
    assert all(0 <= v <= 1 for v in logged(trainer, "rlpost/rollout/self_critique/ratio_clip_frac"))
    assert logged(trainer, "rlpost/rollout/critic_frac") == pytest.approx([K / G, K / G])
