"""token_f1, chrf and bleu (rlpost/rewards/token_f1.py, chrf.py, bleu.py): hand-computed scores, references, errors."""

from __future__ import annotations

import math

import pytest

import rlpost.components  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.token_f1 import token_f1
from rlpost.scoring.terms import build_reward_terms


def make(name, **params):
    cls = REWARDS.get(name)
    return cls(build_config(cls.Config, params, "test"))


def score(name, completions, answers, **params):
    return make(name, **params)(prompts=["p"] * len(completions), completions=completions, answer=answers)


def test_token_f1_by_hand():
    # "The cat, sat." -> [the, cat, sat]; "the cat sat on the mat" -> 6 tokens, 3 shared:
    # P = 3/3, R = 3/6 -> F1 = 2 * 1 * 0.5 / 1.5 = 2/3
    assert token_f1("The cat, sat.", "the cat sat on the mat") == pytest.approx(2 / 3)
    # bags, not sets: "the the the" vs "the cat" shares min(3, 1) = 1 -> P = 1/3, R = 1/2 -> F1 = 0.4
    assert token_f1("the the the", "the cat") == pytest.approx(0.4)
    assert token_f1("dog", "cat") == 0.0
    assert token_f1("", "") == 1.0 and token_f1("", "cat") == 0.0 and token_f1("...", "cat") == 0.0


def test_token_f1_reward_references_think_and_none():
    rewards = score(
        "token_f1",
        ["<think>the mat</think> the cat sat", [{"role": "assistant", "content": "a dog"}], "anything"],
        [["the cat", "the cat sat"], "a dog", None],
    )
    # max over references: vs "the cat" P = 2/3, R = 1 -> 0.8; vs "the cat sat" -> 1.0
    assert rewards == [1.0, 1.0, None]
    kept = score("token_f1", ["<think>the mat</think> cat"], ["the mat"], strip_think=False)
    # tokens [think, the, mat, think, cat] (punctuation split) vs [the, mat]: P = 2/5, R = 1 -> F1 = 4/7
    assert kept == [pytest.approx(4 / 7)]


def test_chrf_by_hand():
    # char_order 1, word_order 0: character unigrams (whitespace dropped).
    # "abc" vs "abd": 2 of 3 match both ways, P = R = 2/3 -> F_beta = 2/3 for any beta.
    assert score("chrf", ["abc"], ["abd"], char_order=1) == [pytest.approx(2 / 3)]
    # "ab" vs "abcd": P = 1, R = 1/2 -> F_2 = (1 + 4) P R / (4 P + R) = 2.5 / 4.5 = 5/9
    assert score("chrf", ["a b"], ["abcd"], char_order=1) == [pytest.approx(5 / 9)]
    # beta 1: 2 P R / (P + R) = 1 / 1.5 = 2/3
    assert score("chrf", ["ab"], ["abcd"], char_order=1, beta=1.0) == [pytest.approx(2 / 3)]
    same, other = score("chrf", ["<think>draft</think>Le chat est noir.", "xyz"], ["Le chat est noir.", "Le chat"])
    assert same == pytest.approx(1.0) and other == 0.0


def test_bleu_by_hand():
    # max_ngram_order 1: BLEU = BP * p1; "the cat sat" vs "the cat sat down": p1 = 3/3,
    # BP = exp(1 - 4/3) since the hypothesis (3) is shorter than the reference (4).
    one = score("bleu", ["the cat sat"], ["the cat sat down"], max_ngram_order=1)
    assert one == [pytest.approx(math.exp(1 - 4 / 3))]
    # Several references: the closest reference length (3) -> BP = 1, p1 = 1.
    assert score("bleu", ["the cat sat"], [["a b c d e", "the cat sat"]], max_ngram_order=1) == [pytest.approx(1.0)]
    same, disjoint, none = score(
        "bleu", ["the cat sat on the mat", "dogs run", "x"], ["the cat sat on the mat", "a cat", None]
    )
    assert same == pytest.approx(1.0) and disjoint == 0.0 and none is None


def test_bad_params_name_the_key_and_list_the_choices():
    with pytest.raises(
        ConfigError, match=r"reward\.terms\[0\]\.params\.smooth_method.*Valid choices: none, floor, add-k, exp"
    ):
        build_reward_terms([{"name": "bleu", "params": {"smooth_method": "laplace"}}])
    with pytest.raises(ConfigError, match=r"reward\.terms\[0\]\.params\.tokenize.*13a"):
        build_reward_terms([{"name": "bleu", "params": {"tokenize": "moses"}}])
    with pytest.raises(ConfigError, match=r"reward\.terms\[0\]\.params\.char_order"):
        build_reward_terms([{"name": "chrf", "params": {"char_order": 0}}])
    with pytest.raises(KeyError, match="reads the dataset column 'reference'.*Columns present: answer"):
        score("chrf", ["a"], ["a"], column="reference")


def test_two_trainer_steps_with_chrf_and_token_f1(tmp_path):
    from support.trainer import make_run, step_logs, train_rlpost

    terms = "reward.terms=[{name: chrf, weight: 1.0}, {name: token_f1, weight: 0.5}]"
    logs = step_logs(train_rlpost(make_run(["train.steps=2", "train.num_generations=2", terms]), tmp_path))
    assert len(logs) == 2
    for log in logs:
        chrf, f1 = log["rewards/chrf/mean"], log["rewards/token_f1/mean"]
        assert 0.0 <= chrf <= 1.0 and 0.0 <= f1 <= 1.0
        # every row has a gold answer, so the combined reward is the weighted sum of the term means
        assert log["rlpost/reward"] == pytest.approx(chrf + 0.5 * f1, abs=1e-3)
