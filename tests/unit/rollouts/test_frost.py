"""Frost (seed 004 #1): the infilling reward by hand and its one-hot form, GCG steps that never lose score,
the infilling tasks, the strategy's refusals, and a 2-step run through the CLI on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.data.infill import infill_rows
from rlpost.rewards.infill_likelihood import InfillLikelihood, middle_text, suffix_logprob
from rlpost.rollouts.frost import gcg_step

from support.runs import one_step


def test_suffix_logprob_by_hand():
    # one row of 3 tokens over a vocabulary of 2; the suffix is the last token (id 1), predicted at position 1
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]]])
    ids = torch.tensor([[0, 0, 1]])
    # softmax([0, log 3]) = [1/4, 3/4]: log p(1) = log 0.75
    assert suffix_logprob(logits, ids, 1).item() == pytest.approx(math.log(0.75))
    # a 2-token suffix: mean of log p(ids[1] = 0 | pos 0) = log 0.5 and log 0.75
    assert suffix_logprob(logits, ids, 2).item() == pytest.approx((math.log(0.5) + math.log(0.75)) / 2)


def test_middle_text_takes_the_first_line_without_quotes_or_blanks():
    assert middle_text([{"role": "assistant", "content": '\n "red meat"\nbecause...'}]) == "red meat"
    assert middle_text("____ lentils ____") == "lentils" and middle_text("  \n ") == ""


@pytest.fixture(scope="module")
def judge():
    cfg = build_config(InfillLikelihood.Config, {"judge": {"source": "tiny_random"}}, "params")
    return InfillLikelihood(cfg)


def test_the_onehot_score_is_the_exact_score_and_gcg_never_loses(judge):
    prefix, middle, suffix = judge.parts("Red meat and", "lentils are", "good sources of iron.")
    exact = judge.score_ids(prefix, [middle], suffix)[0]
    model = judge.load()[0]
    onehot = torch.nn.functional.one_hot(torch.tensor(middle), model.get_input_embeddings().weight.size(0)).float()
    assert judge.score_onehot(prefix, onehot, suffix).item() == pytest.approx(exact.item(), abs=1e-4)
    # by hand: one forward over prefix + middle + suffix, the suffix tokens' log-probs averaged
    ids = torch.tensor([prefix + middle + suffix])
    logp = torch.log_softmax(model(ids).logits[0].float(), -1)
    by_hand = sum(logp[len(prefix) + len(middle) + t - 1, suffix[t]] for t in range(len(suffix))) / len(suffix)
    assert exact.item() == pytest.approx(by_hand.item(), abs=1e-5)
    generator = torch.Generator().manual_seed(0)
    ids_now, score = list(middle), exact.item()
    for _ in range(3):
        ids_now, new = gcg_step(judge, prefix, ids_now, suffix, topk=8, candidates=8, generator=generator)
        assert new >= score - 1e-6 and len(ids_now) == len(middle)  # a swap keeps the length; never a loss
        assert judge.score_ids(prefix, [ids_now], suffix)[0].item() == pytest.approx(new, abs=1e-5)
        score = new
    rows = judge(["q"] * 3, ["lentils are", "", "x"], prefix=["Red meat and", "a", None], suffix=["good.", "b", "c"])
    assert rows[1] == -10.0 and rows[2] is None and rows[0] < 0  # empty fill: `empty`; no prefix: not scored


def test_infill_rows_blank_two_or_three_inner_words():
    rows = infill_rows(seed=1, size=20)
    assert rows == infill_rows(seed=1, size=20) and rows != infill_rows(seed=2, size=20)
    for row in rows:
        assert len(row["answer"].split()) in (2, 3) and len(row["prefix"].split()) >= 2
        assert len(row["suffix"].split()) >= 2
        assert f'"{row["prefix"]} ____ {row["suffix"]}"' in row["question"]


def test_frost_needs_its_reward_and_room_in_the_group():
    with pytest.raises(ConfigError, match=r"frost needs the differentiable reward term 'infill_likelihood'"):
        build_run(compose(["model=tiny-random", "recipe=frost", "reward=math_answer"]))
    with pytest.raises(ConfigError, match=r"per_group=4 must be smaller than train.num_generations=4"):
        build_run(compose(["model=tiny-random", "recipe=frost", "algorithm.rollout.per_group=4"]))


def test_recipe_runs_two_steps_and_logs_its_gain(tmp_path):
    rows = one_step("frost", tmp_path, "train.steps=2", "eval.size=2", "eval.samples=2", "eval.pass_k=[1,2]")
    steps = [r for r in rows if "rlpost/rollout/frost/gain" in r]
    assert len(steps) == 2
    # TINY_CLI: G = 2, one improved fill per group when GCG found a better one
    assert all(r["rlpost/rollout/frost/gain"] >= 0.0 and r["rlpost/rollout/frost_frac"] <= 0.5 for r in steps)
    last = {k: v for r in rows for k, v in r.items()}
    assert last["eval/sampled/reward_best@2"] >= last["eval/sampled/reward_best@1"]
