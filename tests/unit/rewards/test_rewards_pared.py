"""pared (rlpost/rewards/pared.py, seed 000 #17): features by hand, one discriminator update by hand, state
round trip, errors, and 2 tiny-random trainer steps where the discriminator weights move and are checkpointed."""

from __future__ import annotations

import json
import math

import pytest
import torch

import rlpost.rewards.pared  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.pared import features
from rlpost.scoring.terms import build_reward_terms


def make(**params):
    cls = REWARDS.get("pared")
    return cls(build_config(cls.Config, params, "test"))


def test_features_by_hand():
    names = ("length", "unique_ratio", "mean_word_len", "punct_rate", "digit_rate", "newline_rate", "ends_sentence")
    # "The cat saw 2 cats.\nThe end." -> words [The, cat, saw, 2, cats., The, end.] = 7, distinct lower 6;
    # word chars 3+3+3+1+5+3+4 = 22 -> 22/7/10; non-space chars 22, punctuation 2 ("." x2), digits 1; 1 newline
    text = "The cat saw 2 cats.\nThe end."
    got = features(text, names, length_scale=10.0)
    assert got == pytest.approx([0.7, 6 / 7, 22 / 70, 2 / 22, 1 / 22, 1 / 7, 1.0])
    assert features("", names, 10.0) == [0.0] * 7
    assert features(" ".join(["w"] * 30), ("length",), 10.0) == [1.0]  # saturates


def test_one_update_by_hand():
    # two features; demos (label 1) f = [1, 0], [1, 1]; policy (label 0) f = [0, 0], [0, 1]
    # start w = 0, b = 0 -> D = 0.5 everywhere
    # dL/dw = -mean_demo (1 - D) f + mean_policy D f = -0.5 * [1, 0.5] + 0.5 * [0, 0.5] = [-0.5, 0]
    # dL/db = -mean_demo (1 - D) + mean_policy D = -0.5 + 0.5 = 0
    # lr = 0.5 -> w = [0.25, 0], b = 0
    reward = make(features=["length", "ends_sentence"], lr=0.5, length_scale=1.0)
    demo = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    policy = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    reward.update(demo, policy)
    assert reward.weight.tolist() == pytest.approx([0.25, 0.0])
    assert reward.bias.item() == pytest.approx(0.0)
    # second step: D(demo) = sigmoid(0.25) = s for both, D(policy) = 0.5
    # dL/dw = -(1 - s) * [1, 0.5] + 0.5 * [0, 0.5]; dL/db = -(1 - s) + 0.5
    s = 1 / (1 + math.exp(-0.25))
    reward.update(demo, policy)
    assert reward.weight.tolist() == pytest.approx([0.25 + 0.5 * (1 - s), 0.5 * (0.5 * (1 - s) - 0.25)])
    assert reward.bias.item() == pytest.approx(-0.5 * (0.5 - (1 - s)))
    assert reward.updates == 2


def test_call_scores_then_learns_only_when_learning():
    reward = make(features=["length", "ends_sentence"], lr=1.0, length_scale=2.0)
    completions = ["a b c", "x"]  # features [1, 0], [0.5, 0]
    golds = ["It is done.", "Yes."]  # features [1, 1], [0.5, 1]
    logged = {}
    out = reward(prompts=["p", "p"], completions=completions, answer=golds, log_metric=logged.__setitem__)
    assert out == [0.5, 0.5] and reward.updates == 0  # not learning outside the trainer
    assert logged["pared/disc_acc"] == pytest.approx(0.5)  # demos at 0.5 count as right, policy at 0.5 wrong
    reward.learning = True
    out = reward(prompts=["p", "p"], completions=completions, answer=golds)
    assert out == [0.5, 0.5]  # scored before the update
    # dL/dw = -0.5 * mean([1, 1], [0.5, 1]) + 0.5 * mean([1, 0], [0.5, 0]) = [-0.375 + 0.375, -0.5] = [0, -0.5]
    assert reward.weight.tolist() == pytest.approx([0.0, 0.5])
    after = reward(prompts=["p"], completions=["Done."], answer=["Fine."])
    assert after[0] > 0.5  # a sentence-ending completion now looks like a demonstration


def test_state_round_trip_and_demos_file(tmp_path):
    reward = make(features=["length", "ends_sentence"])
    reward.weight, reward.bias, reward.updates = torch.tensor([1.0, -2.0]), torch.tensor(0.5), 7
    other = make(features=["length", "ends_sentence"])
    other.load_state_dict(reward.state_dict())
    assert other.weight.tolist() == [1.0, -2.0] and other.bias.item() == 0.5 and other.updates == 7
    with pytest.raises(ValueError, match="features"):
        make(features=["length"]).load_state_dict(reward.state_dict())
    path = tmp_path / "demos.jsonl"
    path.write_text("\n".join(json.dumps({"response": r}) for r in ["One.", "Two."]) + "\n")
    filed = make(demo_column=None, demos_path=str(path), demos_per_update=3)
    assert set(filed.demonstrations({}, 2)) <= {"One.", "Two."} and len(filed.demonstrations({}, 2)) == 3


def test_bad_params_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.features.*choices: length"):
        build_reward_terms([{"name": "pared", "params": {"features": ["size"]}}])
    with pytest.raises(ConfigError, match="exactly one of demo_column and demos_path"):
        build_reward_terms([{"name": "pared", "params": {"demo_column": None}}])
    with pytest.raises(ConfigError, match="demos_path"):
        build_reward_terms([{"name": "pared", "params": {"demo_column": None, "demos_path": str(tmp_path / "x")}}])


def test_two_trainer_steps_move_the_discriminator(tmp_path):
    from rlpost.runs.state import STATE_FILE

    from support.trainer import make_run, step_logs, train_rlpost

    run = make_run(
        [
            "train.steps=2",
            "train.num_generations=2",
            "train.completions_per_step=4",
            "train.save_steps=2",
            "reward.terms=[{name: pared, params: {lr: 1.0, length_scale: 8}}]",
        ]
    )
    pared = run.reward.funcs[0]
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    assert len(logs) == 2 and pared.updates == 2 and pared.learning is False
    assert pared.weight.abs().sum() > 0  # started at 0
    for log in logs:
        assert 0.0 < log["rewards/pared/mean"] < 1.0 and math.isfinite(log["pared/disc_acc"])
    saved = sorted(tmp_path.glob(f"checkpoint-*/{STATE_FILE}"))
    assert saved, "no checkpoint state written"
    state = torch.load(saved[-1], weights_only=True)["reward.terms.pared"]
    assert torch.equal(state["weight"], pared.weight) and state["updates"] == 2
    fresh = make(lr=1.0, length_scale=8)  # resume: a new discriminator restored from the checkpoint
    fresh.load_state_dict(state)
    assert torch.equal(fresh.weight, pared.weight) and fresh.bias.item() == pared.bias.item()
