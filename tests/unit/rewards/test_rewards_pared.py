"""pared (rlpost/rewards/pared.py, seed 000 #17): surface and prompt-aware features by hand, one discriminator
update by hand, the same response scored differently under two prompts, judged AI-feedback features (the real
OpenAI-compatible judge backend on a local HTTP server, tests/support/judges.py), one discriminator per audience,
state round trip, errors, and 2 tiny-random trainer steps where the discriminator weights move and are
checkpointed."""

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

from support.judges import requests_for, server  # noqa: F401  (the endpoint fixture)


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


def test_prompt_features_by_hand():
    names = ("prompt_overlap", "prompt_numbers_used", "new_numbers", "length_ratio")
    prompt = "Calculate 5 * 33.\nGive only the final answer."
    # prompt: words [Calculate, 5, *, 33., Give, only, the, final, answer.] = 9; content words (4+ letters)
    #   W(x) = {calculate, give, only, final, answer}; numbers N(x) = {5, 33}
    # response: 11 words; W(y) = {final, answer, since}; N(y) = {165, 5, 33}
    # prompt_overlap = |{final, answer}| / 3; prompt_numbers_used = |{5, 33}| / 2; new_numbers = |{165}| / 3;
    # length_ratio = r / (1 + r), r = 11 / 9 -> 11 / 20
    worked = "The final answer is 165, since 5 * 33 = 165."
    assert features(worked, names, 10.0, prompt) == pytest.approx([2 / 3, 1.0, 1 / 3, 11 / 20])
    # a bare result: no content words (0), none of the prompt's numbers (0), one new number (1), r = 1/9 -> 1/10
    assert features("165", names, 10.0, prompt) == pytest.approx([0.0, 0.0, 1.0, 0.1])
    # with no prompt: nothing overlaps or is used, every number is new, r = 11 / max(0, 1) -> 11/12
    assert features(worked, names, 10.0, "") == pytest.approx([0.0, 0.0, 1.0, 11 / 12])
    # signs: "5 - 9" holds 5 and 9 (the minus is an operator); "-4" is the new number
    assert features("5 - 9 = -4", names[1:3], 10.0, "Calculate 5 - 9.") == pytest.approx([1.0, 1 / 3])
    assert features("", names, 10.0, prompt) == [0.0] * 4


def test_the_same_response_scores_differently_under_two_prompts():
    # Fails on the content-blind discriminator (7 features of the response alone): there D("33") is one number.
    # Demos state a result of their own; the policy echoes its question. With the default (prompt-aware)
    # features, "33" echoes "Calculate 5 * 33." but is a new number for "Calculate 7 + 8.".
    reward = make(lr=1.0)
    reward.learning = True
    prompts = ["Calculate 5 * 33.", "Calculate 7 + 8."]
    for _ in range(3):
        reward(prompts=prompts, completions=["5 * 33", "7 + 8"], answer=["165", "15"])
    reward.learning = False
    echo, new = reward(prompts=prompts, completions=["33", "33"], answer=["165", "15"])
    assert new > echo + 0.05


def test_one_update_on_prompt_features_by_hand():
    # features [prompt_numbers_used, new_numbers]; completions echo the question: "5 * 33" -> [1, 0],
    # "7 + 8" -> [1, 0]; demos "165", "15" -> [0, 1]. At w = 0, b = 0 every D = 0.5:
    # dL/dw = -0.5 * [0, 1] + 0.5 * [1, 0] = [0.5, -0.5], dL/db = 0 -> lr 1: w = [-0.5, 0.5], b = 0
    reward = make(features=["prompt_numbers_used", "new_numbers"], lr=1.0)
    reward.learning = True
    prompts = ["Calculate 5 * 33.", "Calculate 7 + 8."]
    reward(prompts=prompts, completions=["5 * 33", "7 + 8"], answer=["165", "15"])
    assert reward.weight.tolist() == pytest.approx([-0.5, 0.5]) and reward.bias.item() == pytest.approx(0.0)
    reward.learning = False
    # "33": under prompt 1 f = [1/2, 0] -> sigmoid(-0.25); under prompt 2 f = [0, 1] -> sigmoid(0.5)
    out = reward(prompts=prompts, completions=["33", "33"], answer=["165", "15"])
    assert out == pytest.approx([1 / (1 + math.exp(0.25)), 1 / (1 + math.exp(-0.5))])


def test_feedback_criteria_are_judged_feature_columns_by_hand(server):  # noqa: F811
    # the "keyword" endpoint says Yes iff the criterion's last word ("done") is in the response: 1.0 / 0.0
    judge = {"backend": "openai", "base_url": f"{server}/keyword/v1", "cache": False, "retries": 0}
    reward = make(features=["ends_sentence"], feedback=["The response says done"], judge=judge, lr=1.0)
    assert reward.names == ("ends_sentence", "feedback_0") and reward.weight.shape == (2,)
    reward.learning = True
    logged = {}
    # completions "No." -> [1, 0], "Maybe" -> [0, 0]; demos "All done." -> [1, 1] (twice, judged once)
    out = reward(
        prompts=["p", "p"], completions=["No.", "Maybe"], answer=["All done."] * 2, log_metric=logged.__setitem__
    )
    assert out == [0.5, 0.5]
    assert len(requests_for("keyword")) == 3 and logged["pared/judge_calls"] == 3.0  # 2 completions + 1 distinct demo
    assert "Task: p" in requests_for("keyword")[0]["prompt"]  # the judge sees the question
    assert logged["pared/feedback_0/demo"] == 1.0 and logged["pared/feedback_0/policy"] == 0.0
    # D = 0.5 everywhere: dL/dw = -0.5 * [1, 1] + 0.5 * [0.5, 0] = [-0.25, -0.5], dL/db = 0 -> w = [0.25, 0.5]
    assert reward.weight.tolist() == pytest.approx([0.25, 0.5]) and reward.bias.item() == pytest.approx(0.0)
    reward.learning = False
    # the judged column enters D: "Now done." f = [1, 1] -> sigmoid(0.75); "Now finished." f = [1, 0] -> sigmoid(0.25)
    got = reward(prompts=["p", "p"], completions=["Now done.", "Now finished."], answer=["x", "x"])
    assert got == pytest.approx([1 / (1 + math.exp(-0.75)), 1 / (1 + math.exp(-0.25))])


def test_feedback_failures_are_half_and_bad_judge_params_are_config_errors(server):  # noqa: F811
    judge = {"backend": "openai", "base_url": f"{server}/malformed/v1", "cache": False, "retries": 0}
    reward = make(features=["length"], feedback=["The response is kind"], judge=judge)
    assert reward.featurize(["a"], ["p"])[:, 1].tolist() == [0.5]  # "Maybe, it depends." is no verdict: 0.5
    with pytest.raises(ConfigError, match=r"params.feedback_template: must contain \{criterion\}"):
        build_reward_terms(
            [{"name": "pared", "params": {"feedback": ["x"], "feedback_template": "{question} {response}"}}]
        )
    with pytest.raises(ConfigError, match=r"params.judge.*backend"):
        build_reward_terms([{"name": "pared", "params": {"feedback": ["x"], "judge": {"backend": "gpt"}}}])


def audience_reward(**params):
    return make(features=["length", "ends_sentence"], length_scale=2.0, lr=1.0, audience_column="audience", **params)


def test_one_discriminator_per_audience_by_hand():
    reward = audience_reward(audiences=["kids", "experts", "adults"])
    assert reward.weight.shape == (3, 2) and reward.bias.shape == (3,)
    reward.learning = True
    logged = {}
    # kids: completion "a b" -> [1, 0], demo "Ok." -> [0.5, 1]; experts: completion "Fine." -> [0.5, 1], demo
    # "a b c d" -> [1, 0]; adults: no row. D = 0.5 everywhere at the start:
    # kids    dL/dw = -0.5 * [0.5, 1] + 0.5 * [1, 0] = [0.25, -0.5]  -> w_kids    = [-0.25, 0.5]
    # experts dL/dw = -0.5 * [1, 0] + 0.5 * [0.5, 1] = [-0.25, 0.5]  -> w_experts = [0.25, -0.5]
    # (one shared discriminator would average the two gradients to 0 and learn nothing)
    reward(
        prompts=["p", "p"],
        completions=["a b", "Fine."],
        answer=["Ok.", "a b c d"],
        audience=["kids", "experts"],
        log_metric=logged.__setitem__,
    )
    assert reward.weight.flatten().tolist() == pytest.approx([-0.25, 0.5, 0.25, -0.5, 0.0, 0.0])
    assert reward.bias.tolist() == pytest.approx([0.0, 0.0, 0.0])
    assert logged["pared/disc_acc/kids"] == 0.5 and "pared/disc_acc/adults" not in logged
    # each row is scored by its own audience's discriminator: "Ok." -> [0.5, 1]
    reward.learning = False
    out = reward(prompts=["p"] * 3, completions=["Ok."] * 3, answer=["x"] * 3, audience=["kids", "experts", "adults"])
    assert out == pytest.approx([1 / (1 + math.exp(-0.375)), 1 / (1 + math.exp(0.375)), 0.5])
    # a batch of kids only moves the kids' discriminator: D(demo) = sigmoid(-0.125 + 0.5) = s,
    # D(policy) = sigmoid(-0.25) = t; dL/dw = -(1 - s) [0.5, 1] + t [1, 0], dL/db = -(1 - s) + t
    reward.learning = True
    reward(prompts=["p"], completions=["a b"], answer=["Ok."], audience=["kids"])
    s, t = 1 / (1 + math.exp(-0.375)), 1 / (1 + math.exp(0.25))
    kids = [-0.25 - (-(1 - s) * 0.5 + t), 0.5 - (-(1 - s))]
    assert reward.weight.flatten().tolist() == pytest.approx([*kids, 0.25, -0.5, 0.0, 0.0])
    assert reward.bias.tolist() == pytest.approx([-(-(1 - s) + t), 0.0, 0.0], abs=1e-6)  # float32


def test_audience_state_errors_and_demos_file(tmp_path):
    reward = audience_reward(audiences=["kids", "experts"])
    reward.weight, reward.bias, reward.updates = torch.tensor([[1.0, 2.0], [3.0, 4.0]]), torch.tensor([5.0, 6.0]), 3
    state = reward.state_dict()
    assert state["audiences"] == ["kids", "experts"]
    other = audience_reward(audiences=["kids", "experts"])
    other.load_state_dict(state)
    assert other.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]] and other.bias.tolist() == [5.0, 6.0]
    single = make(features=["length", "ends_sentence"])
    with pytest.raises(ValueError, match="one discriminator"):  # an old single-discriminator state
        other.load_state_dict(single.state_dict())
    with pytest.raises(ValueError, match="audience_column is null"):
        single.load_state_dict(state)
    with pytest.raises(ValueError, match="'teens' .* not among audiences"):
        other(prompts=["p"], completions=["a"], answer=["b"], audience=["teens"])
    with pytest.raises(ConfigError, match="audience_column and audiences"):
        build_reward_terms([{"name": "pared", "params": {"audience_column": "audience"}}])
    with pytest.raises(ConfigError, match="distinct"):
        build_reward_terms([{"name": "pared", "params": {"audience_column": "a", "audiences": ["x", "x"]}}])
    path = tmp_path / "demos.jsonl"
    lines = [{"response": "Yes.", "audience": "kids"}, {"response": "No", "audience": "experts"}]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    filed = audience_reward(audiences=["kids", "experts"], demo_column=None, demos_path=str(path), demos_per_update=2)
    drawn = filed.demonstrations(["p", "p"], [1, 1], {})  # a batch of experts draws experts' demos only
    assert [(d.response, d.audience) for d in drawn] == [("No", 1), ("No", 1)]
    with pytest.raises(ConfigError, match=r"no demonstrations for audiences \['adults'\]"):
        build_reward_terms(
            [
                {
                    "name": "pared",
                    "params": {
                        "features": ["length"],
                        "demo_column": None,
                        "demos_path": str(path),
                        "audience_column": "audience",
                        "audiences": ["kids", "experts", "adults"],
                    },
                }
            ]
        )


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
    path.write_text("\n".join(json.dumps({"response": r, "prompt": "Say a number."}) for r in ["One.", "Two."]) + "\n")
    filed = make(demo_column=None, demos_path=str(path), demos_per_update=3)
    drawn = filed.demonstrations(["q", "q"], [0, 0], {})
    assert {d.response for d in drawn} <= {"One.", "Two."} and len(drawn) == 3
    assert {d.prompt for d in drawn} == {"Say a number."}  # each demo keeps its own prompt for the prompt features
    (tmp_path / "bare.jsonl").write_text(json.dumps({"response": "One."}) + "\n")
    with pytest.raises(ConfigError, match="'prompt'"):  # prompt features need the demo's prompt
        build_reward_terms(
            [{"name": "pared", "params": {"demo_column": None, "demos_path": str(tmp_path / "bare.jsonl")}}]
        )
    surface = make(features=["length"], demo_column=None, demos_path=str(tmp_path / "bare.jsonl"))
    drawn = surface.demonstrations(["q"], [0], {})
    assert [d.response for d in drawn] == ["One."] * 16  # surface features only: no prompt needed


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
