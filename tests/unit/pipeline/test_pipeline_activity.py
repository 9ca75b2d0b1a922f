"""The activity figures the pipeline logs (rlpost/pipeline.py) on hand-made tensors: which stage reports which
figure, under ``active/`` (not rlpost/), on training batches only, and none for the plain GRPO path."""

from __future__ import annotations

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.pipeline import run_pipeline, unprefixed, varied_columns

from support.pipeline import pipeline_inputs
from support.trainer import TINY

TWO_TERMS = "reward.terms=[{name: exact_match, weight: 1.0}, {name: exact_match, weight: 0.5}]"
# rows 0,1 group 0; rows 2,3 group 1 (G = 2). Column 0 varies in group 0 only, column 1 nowhere
TERMS = [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.0]]


def figures(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k.startswith("active/")}


def test_the_plain_grpo_path_reports_no_figure_and_the_reward_columns_are_counted():
    run = build_run(compose([*TINY, TWO_TERMS]))
    result = run_pipeline(pipeline_inputs(TERMS, 2), run.reward, run.algorithm)
    assert figures(result.metrics) == {}  # group_norm, weighted_sum, no rollout strategy, no selector
    assert result.metrics["varied_reward_columns"] == 1.0 == varied_columns(result.batch.reward_terms, 2)


def test_each_stage_s_figure():
    overrides = [*TINY, TWO_TERMS, "algorithm/advantage=group_center", "algorithm.dynamic_sampling=true"]
    overrides += ["algorithm.overlong.soft_penalty=true", "algorithm.overlong.cache_len=2"]
    run = build_run(compose(overrides))
    # lengths 4 of max 4 with cache 2: every row gets the full penalty -1 (4 of 4 rows shaped)
    result = run_pipeline(pipeline_inputs(TERMS, 2), run.reward, run.algorithm)
    # group 1's task rewards are all equal (1, 1): dynamic sampling drops 2 of 4 rows. group_center: group 0
    # gets +-0.5 where GRPO gives +-0.707; group 1 gets 0 as GRPO: one factor (0.707, the median of the two
    # ratios of group 0) makes them equal, so 0
    assert figures(result.metrics) == {
        "active/shape/overlong": 1.0,
        "active/advantage/group_norm": 0.0,
        "active/keep/dynamic_sampling": 0.5,
    }
    assert all(unprefixed(name) for name in figures(result.metrics))
    evaluation = run_pipeline(pipeline_inputs(TERMS, 2, training=False), run.reward, run.algorithm)
    assert figures(evaluation.metrics) == {} and "varied_reward_columns" not in evaluation.metrics


def test_a_rollout_strategy_and_a_combine_report_theirs():
    run = build_run(compose([*TINY, TWO_TERMS, "algorithm/rollout=forced_refusal", "reward/combine=focal"]))
    kinds = ["natural", "forced_refusal", "natural", "natural"]
    x = pipeline_inputs(TERMS, 2, kinds=kinds)
    x.rows = [{"unanswerable": False}] * 4
    result = run_pipeline(x, run.reward, run.algorithm)
    found = figures(result.metrics)
    # forced_refusal: row 1 is forced (and, a refusal on an answerable row, penalised); no natural row refuses,
    # so no other reward moves: 1 of 4. focal re-weights the columns, but column 1 is 0 everywhere, so the reward is a
    # multiple of column 0 and GRPO's advantage of it equals the plain path's: 0
    assert found == {"active/rollout/forced_refusal": 0.25, "active/combine/focal": 0.0}
