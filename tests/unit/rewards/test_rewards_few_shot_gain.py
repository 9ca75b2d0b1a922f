"""few_shot_gain (rlpost/rewards/few_shot_gain.py, FSA-GRPO seed 004 #2): the gain formula by hand, the scorer's
log-probs against a direct forward of the real tiny model, the zero-shot prompt, clipping, errors, and 2 trainer
steps with demonstrations in the prompt."""

from __future__ import annotations

import math

import pytest
import torch

import rlpost.rewards.few_shot_gain  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.few_shot_gain import gain, zero_shot_prompt
from rlpost.scoring.terms import build_reward_terms

TINY = {"source": "tiny_random"}


def make(**params):
    cls = REWARDS.get("few_shot_gain")
    return cls(build_config(cls.Config, {"model": TINY, "device": "cpu", **params}, "test"))


def test_gain_by_hand():
    with_demos = torch.tensor([-1.0, -2.0, -0.5])
    without = torch.tensor([-2.0, -2.5, -0.5])
    # differences 1.0, 0.5, 0.0 -> mean 0.5, sum 1.5
    assert gain(with_demos, without, "mean") == pytest.approx(0.5)
    assert gain(with_demos, without, "sum") == pytest.approx(1.5)


def test_zero_shot_prompt_replaces_the_last_user_turn():
    prompt = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q: 1+1\nA: 2\n\nQ: 2+2"}]
    assert zero_shot_prompt(prompt, "Q: 2+2") == [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q: 2+2"},
    ]
    assert zero_shot_prompt("demo\n\nQ", "Q") == "Q"


def direct_logprobs(model, tok, context_text, completion):
    ctx = tok(context_text, add_special_tokens=False)["input_ids"]
    tgt = tok(completion, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ctx + tgt])).logits[0].float()
    # log p(y_t | ctx, y_<t) = log_softmax(logits at position len(ctx) + t - 1)[y_t]
    return [torch.log_softmax(logits[len(ctx) + t - 1], -1)[y].item() for t, y in enumerate(tgt)]


def test_reward_is_mean_logprob_difference_under_the_scorer():
    reward = make(scale=2.0, clip=100.0)
    prompt = [{"role": "user", "content": "Q: 1+1\nA: 2\n\nQ: 3+4"}]
    logged = {}
    out = reward(
        prompts=[prompt, prompt], completions=[" 7", ""], question=["Q: 3+4", "Q: 3+4"], log_metric=logged.__setitem__
    )
    tok, model = reward._tokenizer, reward._model
    with_text = tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    without_text = tok.apply_chat_template(
        [{"role": "user", "content": "Q: 3+4"}], tokenize=False, add_generation_prompt=True
    )
    a = direct_logprobs(model, tok, with_text, " 7")
    b = direct_logprobs(model, tok, without_text, " 7")
    expected = 2.0 * sum(x - y for x, y in zip(a, b)) / len(a)
    assert out[0] == pytest.approx(expected, abs=1e-5)
    assert out[1] is None  # empty completion: unscorable
    assert logged["few_shot_gain/gain"] == pytest.approx(expected / 2.0, abs=1e-5)
    assert expected != 0.0  # demonstrations change the random model's log-probs: the test can fail
    clipped = make(scale=1e6, clip=0.25)(prompts=[prompt], completions=[" 7"], question=["Q: 3+4"])
    assert clipped == [math.copysign(0.25, expected)]


def test_bad_params_are_config_errors():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.clip"):
        build_reward_terms([{"name": "few_shot_gain", "params": {"clip": 0, "model": TINY}}])
    with pytest.raises(ConfigError, match="reduce"):
        build_reward_terms([{"name": "few_shot_gain", "params": {"reduce": "max", "model": TINY}}])


def test_two_trainer_steps_with_demonstrations(tmp_path):
    from support.trainer import make_run, step_logs, train_rlpost

    run = make_run(
        [
            "train.steps=2",
            "train.num_generations=2",
            "train.completions_per_step=4",
            "data.template='Q: 2 + 2\nA: 4\n\nQ: 5 - 3\nA: 2\n\nQ: {question}\nA:'",
            "reward.terms=[{name: few_shot_gain, params: {device: cpu}}]",  # scorer: a copy of the run's model
        ]
    )
    trainer = train_rlpost(run, tmp_path)
    logs = step_logs(trainer)
    assert len(logs) == 2
    for log in logs:
        assert math.isfinite(log["rewards/few_shot_gain/mean"]) and math.isfinite(log["few_shot_gain/gain"])


def test_conf_scores_with_a_copy_of_the_run_model():
    from rlpost.app import compose
    from rlpost.build import build_run

    run = build_run(compose(["reward=few_shot_gain", "model=tiny-random"]))
    assert run.reward.names == ["math_answer", "few_shot_gain"]
    assert run.reward.funcs[1].scorer.source == "tiny_random"  # model: null -> the run's model
    assert run.reward.weights.tolist() == pytest.approx([1.0, 0.1])
