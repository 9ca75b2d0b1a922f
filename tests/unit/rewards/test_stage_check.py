"""reward=stage_check (StructPO's stage-local quality, seed 000 #10): each stage scored on its own text against its
own column, by hand; one reward column per stage; its columns checked against the data before any model loads."""

from __future__ import annotations

import pytest

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import load_datasets
from rlpost.rewards.stage_check import StageCheck, lcs, ops, results
from rlpost.train import _check_columns

SLIP = "<plan>add 5, then subtract 4</plan><compute>12 + 5 = 17\n17 * 3 = 51\n51 - 4 = 46</compute><answer>46</answer>"
ROW = {"plan": "+ 5, * 3, - 4", "intermediates": "17, 51, 47", "answer": "47"}  # start 12: 17, 51, 47


def scores(*completions: str, **row) -> list[list[float | None]]:
    reward = StageCheck(StageCheck.Config())  # plan: steps, compute: results, answer: number
    columns = {k: [v] * len(completions) for k, v in {**ROW, **row}.items()}
    return reward.column_scores([None] * len(completions), list(completions), **columns)


def test_the_parsers_by_hand():
    assert ops("add 5, then Multiply by 3; 12+50 - 4 padd 7") == [("+", 5), ("*", 3), ("+", 50), ("-", 4)]
    assert results("12 + 5 = 17; 17 * 3 =51, so x = -2 and 3 4") == [17, 51, -2]
    assert lcs([1, 2, 3], [3, 1, 2]) == 2 and lcs(list("abcbdab"), list("bdcaba")) == 4 and lcs([], [1]) == 0


def test_each_stage_is_checked_on_its_own_text_by_hand():
    gold = "<plan>+ 5, * 3, - 4</plan>\n<compute>12 + 5 = 17\n17 * 3 = 51\n51 - 4 = 47</compute>\n<answer>47</answer>"
    assert scores(gold) == [[1.0, 1.0, 1.0]]
    # plan: ops [+5, -4] against [+5, *3, -4]: LCS 2 -> 2/3; compute: results [17, 51, 46] share {17, 51} of
    # {17, 51, 47} -> 2/3; answer: 46 != 47 -> 0
    assert scores(SLIP) == [[pytest.approx(2 / 3), pytest.approx(2 / 3), 0.0]]
    # plan: [*3, +5, -4]: LCS with [+5, *3, -4] is 2 -> 2/3; compute: only numbers after "=" count,
    # [51, 47, 47] as a multiset shares 51 and one 47 with {17, 51, 47} -> 2/3 (the repeated 47 counts once);
    # answer: a sentence, not exactly one number -> 0
    loose = "<plan>* 3, + 5, - 4</plan><compute>12 + 5 is 17, times 3 = 51, 51 - 4 = 47 = 47</compute><answer>It is 47</answer>"
    assert scores(loose) == [[pytest.approx(2 / 3), pytest.approx(2 / 3), 0.0]]
    # copying the operands into the compute stage earns nothing; the last complete <answer> block is the stage;
    # an unclosed block is no stage (0)
    copied = "<plan>+ 5, * 3, - 4</plan><compute>12 5 3 4 17 51 47</compute><answer>12</answer> <answer> 47 </answer>"
    assert scores(copied) == [[1.0, 0.0, 1.0]]
    assert scores("<plan>+ 5, * 3, - 4\n12 + 5 = 17\n17 * 3 = 51\n51 - 4 = 47, so 47") == [[0.0, 0.0, 0.0]]
    # a stage that reads text outside its own block would credit this one: every right value is outside
    outside = (
        "+ 5, * 3, - 4: 12 + 5 = 17, 17 * 3 = 51, 51 - 4 = 47 <plan>none</plan><compute></compute><answer>x</answer>"
    )
    assert scores(outside) == [[0.0, 0.0, 0.0]]
    # no gold: unscorable
    assert scores(gold, plan=None, intermediates=None, answer=None) == [[None, None, None]]


def test_called_whole_it_is_the_weighted_mean_of_its_stages():
    reward = StageCheck(StageCheck.Config())
    columns = {k: [v] for k, v in ROW.items()}
    assert reward(None, [SLIP], **columns) == [pytest.approx((2 / 3 + 2 / 3 + 0) / 3)]  # equal weights


def test_one_column_per_stage_and_its_columns_are_checked_before_any_model_loads():
    sizes = ["model=tiny-random", "data.train_size=8", "data.eval_size=4", "eval.size=4"]
    run = build_run(compose([*sizes, "data=staged_arith", "reward=stage_check"]))
    assert run.reward.names == ["stage_check/plan", "stage_check/compute", "stage_check/answer"]
    assert run.reward.weights.tolist() == [1.0, 1.0, 1.0]  # term weight 3 shared by the 3 stages' weights
    _check_columns(run, *load_datasets(run.data))  # staged_arith has plan, intermediates, answer
    wrong = build_run(compose([*sizes, "reward=stage_check"]))  # basic_arithmetic has no per-stage column
    with pytest.raises(ConfigError, match=r"stage_check/plan: params.stages\[0\].column='plan' names no column"):
        _check_columns(wrong, *load_datasets(wrong.data))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("reward.terms.0.params.stages.1.tag=plan", r"stage tags must be unique .*\['plan'\]"),
        ("reward.terms.0.params.stages.0.tag='<plan>'", "is not a plain tag name"),
        ("reward.terms.0.params.stages.0.check=exact", "Valid choices: steps, results, number"),
        ("reward.terms.0.params.stages=[]", "at least one stage"),
    ],
)
def test_bad_stages_are_refused_with_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose(["data=staged_arith", "reward=stage_check", override]))
