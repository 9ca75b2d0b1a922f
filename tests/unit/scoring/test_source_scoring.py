"""A data=mixture run's reward columns (rlpost/scoring/sources.py): each source's terms score its own rows, None
(NaN) on the others, so the run's combine gives each row its own source's reward."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import torch

from rlpost.combine.weighted_sum import WeightedSum
from rlpost.data.mixture import SOURCE_COLUMN
from rlpost.scoring.guard import FailurePolicy, GuardedReward
from rlpost.scoring.sources import SourceRows, mixture_terms, scoped
from rlpost.scoring.terms import build_reward_terms


def parts(*nodes):
    funcs, names, weights = build_reward_terms(list(nodes))
    return SimpleNamespace(funcs=funcs, names=names, weights=weights, failure=[FailurePolicy()] * len(funcs))


MATH = {"name": "math_answer", "weight": 1.0}
HASH = {"name": "callable", "weight": 2.0, "params": {"path": "support.rewards:text_hash_reward"}}
LABELS = ["a", "a", "b", "b", "a", "a"]
ANSWERS = ["4", "4", "7", "7", "9", "9"]
COMPLETIONS = ["4", "5", "7", "7", "9", "x"]


def call(func, labels=LABELS, answers=ANSWERS, completions=COMPLETIONS):
    return func(prompts=["p"] * len(completions), completions=completions, answer=answers, **{SOURCE_COLUMN: labels})


def test_each_source_scores_its_own_rows_and_nan_elsewhere():
    math_a, hash_b = parts(MATH), parts(HASH)
    funcs, names, weights, failure = mixture_terms([("a", None, math_a), ("b", None, hash_b)])
    assert names == ["a/math_answer", "b/callable"] and weights.tolist() == [1.0, 2.0] and len(failure) == 2
    scored = [call(f) for f in funcs]
    assert scored[0] == [1.0, 0.0, None, None, 1.0, 0.0]  # math_answer on a's rows, against a's answers
    own_b = hash_b.funcs[0](prompts=["p", "p"], completions=["7", "7"])
    assert scored[1] == [None, None, *own_b, None, None]
    terms = torch.tensor([[float("nan") if v is None else v for v in column] for column in scored]).T  # [N, R]
    rewards, _ = WeightedSum(WeightedSum.Config())(terms, weights, 2)
    expected = torch.tensor([1.0, 0.0, 2 * own_b[0], 2 * own_b[1], 1.0, 0.0])
    assert torch.allclose(rewards, expected)  # each row: its own source's terms, weighted
    assert call(funcs[1], labels=["a"] * 6) == [None] * 6  # no row of b: not called, all None


def test_group_rewards_see_whole_groups_of_their_source_and_the_trainers_flags_reach_them():
    (inner,) = parts({"name": "majority_vote", "weight": 1.0}).funcs
    func = scoped(inner, "a", SourceRows("a"))
    assert func.is_group_reward and type(func).registry_name == "majority_vote" and func.__name__ == "a/majority_vote"
    seen = []
    original = type(inner).score_group

    def spy(self, prompts, completions, rows):
        seen.append((list(completions), self.group_size, self.learning))
        return original(self, prompts, completions, rows)

    type(inner).score_group = spy
    try:
        func.group_size, func.learning = 2, True
        assert call(func) == [1.0, 0.0, None, None, 1.0, 0.0]  # first of a tie wins: groups (4, 5) and (9, x)
        assert call(func, labels=["b"] * 6) == [None] * 6  # called on no rows (a gather would stay in step)
    finally:
        type(inner).score_group = original
    assert seen == [(["4", "5"], 2, True), (["9", "x"], 2, True)]
    assert (inner.group_size, inner.learning) == (None, False)  # put back: held-out evaluation calls the term itself


def test_the_terms_of_a_source_share_one_cut_of_the_batch():
    rows = SourceRows("a")
    prompts, completions = ["p"] * 6, COMPLETIONS
    first = rows.select(prompts, completions, {SOURCE_COLUMN: LABELS})
    again = rows.select(prompts, completions, {SOURCE_COLUMN: LABELS})
    assert first[0] == [0, 1, 4, 5] and again[1] is first[1] and again[2] is first[2]  # a rubric's columns share it
    assert rows.select(list(prompts), completions, {SOURCE_COLUMN: LABELS})[1] is not first[1]  # another batch


def test_a_scoped_term_keeps_the_terms_flags_state_and_pickles():
    (inner,) = parts(MATH).funcs
    func = scoped(inner, "a", SourceRows("a"))
    assert func.verifiable and func.is_verifiable() and func.data_columns() == [("column", "answer")]
    assert not func.stateful and type(func).registry_name == "math_answer"
    back = pickle.loads(pickle.dumps(func))
    assert type(back) is type(func)
    assert call(back) == call(func) and back.__name__ == "a/math_answer"
    guarded = GuardedReward(func, FailurePolicy())  # the trainer's failure guard wraps it as any term
    assert call(guarded) == [1.0, 0.0, None, None, 1.0, 0.0]


def test_a_stateful_term_saves_its_state_through_the_wrapper():
    (inner,) = parts({"name": "pared", "weight": 1.0}).funcs
    func = scoped(inner, "b", SourceRows("b"))
    assert func.stateful and set(func.state_dict()) == set(inner.state_dict())
    state = {**inner.state_dict(), "updates": 5}
    func.load_state_dict(state)
    assert inner.state_dict()["updates"] == 5
