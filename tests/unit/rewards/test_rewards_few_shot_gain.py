"""few_shot_gain (rlpost/rewards/few_shot_gain.py, FSA-GRPO seed 004 #2): a correct completion earns the gain the
demonstrations bring (1 - p_0, or the clipped log-ratio), a wrong one (a copied demonstration output included)
earns nothing; by hand from given log-probs, against a direct forward of the real tiny model (scorer frozen), and
through the trainer (scorer policy: the trainer's forward of the policy on the zero-shot prompt)."""

from __future__ import annotations

import math

import pytest
import torch

import rlpost.rewards.few_shot_gain  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.few_shot_gain import POLICY_LOGPROBS, FewShotGain, gain, zero_shot_prompt
from rlpost.scoring.terms import build_reward_terms

TINY = {"source": "tiny_random"}
QUESTION = "zorp is a made-up operator on two numbers. Examples:\n3 zorp 5 = 11\n2 zorp 7 = 11\n4 zorp 1 = 9\nWhat is 6 zorp 2? Give only the number."  # fmt: skip
ZERO_SHOT = "zorp is a made-up operator on two numbers.\nWhat is 6 zorp 2? Give only the number."  # 2*a + b: 14
PROMPT = [{"role": "user", "content": QUESTION}]


def make(**params):
    cls = REWARDS.get("few_shot_gain")
    return cls(build_config(cls.Config, {"model": TINY, "device": "cpu", **params}, "test"))


def test_gain_by_hand():
    # probability: g = 1 - exp(l_0); log_ratio: g = clip(scale * (l_d - l_0))
    assert gain("probability", math.log(0.2), None, 1.0, 5.0) == pytest.approx(0.8)
    assert gain("log_ratio", math.log(0.2), math.log(0.6), 2.0, 5.0) == pytest.approx(2 * math.log(3))  # 2.197
    assert gain("log_ratio", math.log(0.2), math.log(0.6), 2.0, 1.0) == 1.0
    assert gain("log_ratio", math.log(0.6), math.log(0.2), 1.0, 5.0) == pytest.approx(-math.log(3))


def test_copying_a_demonstrations_output_earns_no_few_shot_credit():
    # The query is 6 zorp 2 = 14 (zorp = 2a + b); "11" and "9" are the demonstrations' outputs. The policy writes
    # the gold "14" without the demonstrations with p_0 = 0.2 (l_0 = log 0.2), so a right answer earns
    # 1 - 0.2 = 0.8 and a wrong one, a copied demonstration output included, 0. (The earlier reward, the
    # completion's log-likelihood gain from the demonstrations under a frozen model, credited the copies.)
    reward = make(zero_shot_column="zero_shot")
    completions = ["11", "14", "It is 14", "9"]
    out = reward(
        prompts=[PROMPT] * 4,
        completions=completions,
        answer=["14"] * 4,
        zero_shot=[ZERO_SHOT] * 4,
        **{POLICY_LOGPROBS: [[math.log(0.2)]] * 4},
    )
    assert out == [0.0, pytest.approx(0.8), pytest.approx(0.8), 0.0]


def test_a_success_without_the_demonstrations_earns_little_and_the_logs_by_hand():
    # two prompts: a memorised operator (p_0 = 0.9 -> g = 0.1) and one only the demonstrations make solvable
    # (p_0 = 0.05 -> g = 0.95); rows: right, copied-and-wrong, right, wrong-not-copied
    reward = make(demos_column="demo_answers", measure="probability")
    logged: dict[str, float] = {}
    lp = [[math.log(0.9)], [math.log(0.9)], [math.log(0.05)], [math.log(0.05)]]
    out = reward(
        prompts=[PROMPT] * 4,
        completions=[[{"role": "assistant", "content": "14"}], "11", "14", "15"],
        answer=["14"] * 4,
        zero_shot=[ZERO_SHOT] * 4,
        demo_answers=['["11", "11", "9"]'] * 4,
        log_metric=logged.__setitem__,
        **{POLICY_LOGPROBS: lp},
    )
    assert out == [pytest.approx(0.1), 0.0, pytest.approx(0.95), 0.0]
    assert logged["few_shot_gain/gain"] == pytest.approx((0.1 + 0.1 + 0.95 + 0.95) / 4)  # every scored row's g
    assert logged["few_shot_gain/zero_shot_p"] == pytest.approx((0.9 + 0.9 + 0.05 + 0.05) / 4)
    assert logged["few_shot_gain/credited"] == 0.5  # rows 1 and 3
    assert logged["few_shot_gain/copied"] == 0.25  # row 2 wrote a demonstration's output; row 4's 15 is none
    # log_ratio: l_d = log 0.6, l_0 = log 0.2 -> g = min(5, 2 * ln 3) for the right answer only
    ratio = make(measure="log_ratio", scale=2.0)
    both = [[math.log(0.2), math.log(0.6)]] * 2
    out = ratio(prompts=[PROMPT] * 2, completions=["14", "11"], answer=["14"] * 2, zero_shot=[ZERO_SHOT] * 2,
                **{POLICY_LOGPROBS: both})  # fmt: skip
    assert out == [pytest.approx(2 * math.log(3)), 0.0]


def test_unscorable_rows_and_no_policy_column_outside_training():
    reward = make()
    out = reward(
        prompts=[PROMPT] * 3,
        completions=["14"] * 3,
        answer=["14", None, "14"],
        zero_shot=[ZERO_SHOT] * 3,
        **{POLICY_LOGPROBS: [[math.log(0.2)], [math.log(0.2)], None]},
    )
    assert out == [pytest.approx(0.8), None, None]
    # held-out evaluation calls the term without the trainer's column: every row unscorable
    assert reward(prompts=[PROMPT], completions=["14"], answer=["14"], zero_shot=[ZERO_SHOT]) == [None]


def test_policy_targets_are_the_gold_after_the_zero_shot_prompt():
    system = [{"role": "system", "content": "S"}, *PROMPT]
    row = {"answer": "14", "zero_shot": ZERO_SHOT}
    assert make().policy_targets(system, row) == [([{"role": "system", "content": "S"}, {"role": "user", "content": ZERO_SHOT}], "14")]  # fmt: skip
    assert make(measure="log_ratio").policy_targets(PROMPT, row) == [
        ([{"role": "user", "content": ZERO_SHOT}], "14"),
        (PROMPT, "14"),
    ]
    assert make().policy_targets(PROMPT, {"answer": None, "zero_shot": ZERO_SHOT}) is None
    assert zero_shot_prompt("demo\n\nQ", "Q") == "Q"
    assert make().rollout_fields == ("policy_logprobs",) and make(scorer="frozen").rollout_fields == ()
    # a data=mixture source's term names its targets on its own source's rows only
    from rlpost.data.mixture import SOURCE_COLUMN
    from rlpost.scoring.sources import ScopedReward, SourceRows

    scoped = ScopedReward(make(), "ops", SourceRows("ops"))
    assert scoped.rollout_fields == ("policy_logprobs",)
    assert scoped.policy_targets(PROMPT, {**row, SOURCE_COLUMN: "ops"}) == make().policy_targets(PROMPT, row)
    assert scoped.policy_targets(PROMPT, {**row, SOURCE_COLUMN: "gsm"}) is None


def gold_logprob(model, tok, messages, text):
    """sum_t log p(a_t | chat(messages), a_<t): one forward of the tiny model on the context and the gold text."""
    ctx = tok(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True), add_special_tokens=False)
    ctx, tgt = ctx["input_ids"], tok(text, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ctx + tgt])).logits[0].float()
    return sum(torch.log_softmax(logits[len(ctx) + t - 1], -1)[y].item() for t, y in enumerate(tgt))


def test_frozen_scorer_scores_the_gold_answer_under_the_real_model():
    reward = make(scorer="frozen")
    out = reward(prompts=[PROMPT, PROMPT], completions=["14", "11"], answer=["14", "14"], zero_shot=[ZERO_SHOT] * 2)
    tok, model = reward._tokenizer, reward._model
    l_0 = gold_logprob(model, tok, [{"role": "user", "content": ZERO_SHOT}], "14")
    l_d = gold_logprob(model, tok, PROMPT, "14")
    assert out[0] == pytest.approx(1 - math.exp(l_0), abs=1e-6) and out[1] == 0.0
    assert 0.0 < out[0] < 1.0  # the random model gives the gold some probability below 1: the test can fail
    ratio = make(scorer="frozen", measure="log_ratio", clip=100.0)(
        prompts=[PROMPT], completions=["14"], answer=["14"], zero_shot=[ZERO_SHOT]
    )
    assert ratio[0] == pytest.approx(l_d - l_0, abs=1e-4) and abs(l_d - l_0) > 1e-3


def test_bad_params_are_config_errors():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.clip"):
        build_reward_terms([{"name": "few_shot_gain", "params": {"clip": 0}}])
    with pytest.raises(ConfigError, match="measure"):
        build_reward_terms([{"name": "few_shot_gain", "params": {"measure": "pmi"}}])
    with pytest.raises(ConfigError, match="scorer"):
        build_reward_terms([{"name": "few_shot_gain", "params": {"scorer": "base"}}])


class Recording(FewShotGain):
    """The real reward, keeping the keyword columns of each call (to check what the trainer handed it)."""

    calls: list[dict] = []

    def __call__(self, prompts, completions, **kwargs):
        self.calls.append({"prompts": prompts, **kwargs})
        return super().__call__(prompts, completions, **kwargs)


def test_the_trainer_hands_the_policys_zero_shot_log_probs_of_the_gold(tmp_path):
    # scorer policy: at the first training batch (the starting weights; a fresh load of the same model) the column
    # rlpost_policy_logprobs holds, per sample, l_0 = sum_t log pi(a*_t | chat(x_0), a*_<t), x_0 the zero_shot turn
    from rlpost.models.loading import load_model, load_tokenizer

    from support.trainer import make_run, step_logs, train_rlpost

    run = make_run(
        [
            "data=few_shot_ops",
            "train.steps=2",
            "train.num_generations=2",
            "train.completions_per_step=4",
            "reward.terms=[{name: math_answer}, {name: few_shot_gain, params: {demos_column: demo_answers}}]",
        ]
    )
    term = run.reward.funcs[1]
    run.reward.funcs[1] = recording = Recording(term.cfg)
    recording.__name__ = term.__name__
    logs = step_logs(train_rlpost(run, tmp_path))
    assert len(logs) == 2
    for log in logs:
        assert 0.0 < log["few_shot_gain/zero_shot_p"] < 1.0 and log["few_shot_gain/gain"] == pytest.approx(
            1 - log["few_shot_gain/zero_shot_p"]
        )
    first = next(call for call in recording.calls if POLICY_LOGPROBS in call)
    model, tok = load_model(run.model), load_tokenizer(run.model)
    for i in (0, 3):
        x_0 = zero_shot_prompt(first["prompts"][i], first["zero_shot"][i])
        expected = gold_logprob(model, tok, x_0, first["answer"][i])
        assert first[POLICY_LOGPROBS][i] == [pytest.approx(expected, abs=1e-3)]
        assert first["prompts"][i][-1]["content"] != x_0[-1]["content"]  # the demonstrations were taken out


def test_conf_scores_with_the_policy_next_to_the_task_reward():
    from rlpost.app import compose
    from rlpost.build import build_run

    run = build_run(compose(["reward=few_shot_gain", "data=few_shot_ops", "model=tiny-random"]))
    assert run.reward.names == ["math_answer", "few_shot_gain"]
    assert run.reward.funcs[1].cfg.scorer == "policy" and run.reward.funcs[1].scorer is None  # no frozen copy
    assert run.reward.weights.tolist() == pytest.approx([1.0, 1.0])
    frozen = build_run(compose(["reward=few_shot_gain", "data=few_shot_ops", "model=tiny-random",
                                "reward.terms.1.params.scorer=frozen"]))  # fmt: skip
    assert frozen.reward.funcs[1].scorer.source == "tiny_random"  # model: null -> the run's model
