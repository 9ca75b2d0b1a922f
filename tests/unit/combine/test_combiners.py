"""The group-centred combiners odrpo (004 #25), rdpo (004 #22) and decoupled/CRPO (004 #8).

Every expected number is worked out by hand in the comments: GRPO's advantage of a column is
(r - mean_g r) / (std_g r + 1e-4) with the Bessel-corrected std, as in group_norm.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlpost.advantages.group_norm import group_advantage
from rlpost.combine.decoupled import Decoupled
from rlpost.combine.odrpo import ODRPO, ODRPOScoreError
from rlpost.combine.rdpo import RDPO, quantiles
from rlpost.core.errors import ConfigError
from rlpost.rewards.rubric import Rubric

EPS = 1e-4
NAN = float("nan")


def col(*values: float) -> torch.Tensor:
    """One reward column as reward_terms [N, 1]."""
    return torch.tensor(values, dtype=torch.float32)[:, None]


# ---- odrpo -------------------------------------------------------------------------------------------


def test_odrpo_hand_computed_sum_mean_and_active_thresholds():
    # Group 1, s = [1, 2, 3, 3], thresholds k = 2, 3 (min 1, max 3):
    #   k=2: b = [0,1,1,1], mean 3/4, std sqrt((9/16 + 3/16)/3) = 1/2 -> (b - 3/4)/(1/2 + eps)
    #   k=3: b = [0,0,1,1], mean 1/2, std sqrt(1/3)            -> (b - 1/2)/(sqrt(1/3) + eps)
    # Group 2, s = [3, 3, 3, 3]: every threshold passed by all -> 0, no active threshold.
    s = col(1, 2, 3, 3, 3, 3, 3, 3)
    a2 = torch.tensor([-0.75, 0.25, 0.25, 0.25]) / (0.5 + EPS)
    a3 = torch.tensor([-0.5, -0.5, 0.5, 0.5]) / (math.sqrt(1 / 3) + EPS)
    expected = torch.cat([a2 + a3, torch.zeros(4)])

    total, m = ODRPO(ODRPO.Config(min_score=1, max_score=3))(s, torch.ones(1), 4)
    torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-6)
    assert m["odrpo/active_thresholds"] == pytest.approx(1.0)  # (2 + 0) / 2 groups
    assert m["odrpo/score_mean"] == pytest.approx(21 / 8)
    assert m["odrpo/unscorable_frac"] == 0.0

    mean, _ = ODRPO(ODRPO.Config(min_score=1, max_score=3, reduce="mean"))(s, torch.ones(1), 4)
    torch.testing.assert_close(mean, expected / 2, rtol=1e-5, atol=1e-6)


def test_odrpo_binary_score_is_grpo_and_scale_none_only_centres():
    r = col(1, 0, 0, 1, 1, 1, 0, 1)
    total, _ = ODRPO(ODRPO.Config(min_score=0, max_score=1))(r, torch.ones(1), 4)
    torch.testing.assert_close(total, group_advantage(r[:, 0], 4))  # one threshold, b = r
    # scale none, s = [1, 2, 3, 3]: (b2 - 3/4) + (b3 - 1/2) = [-1.25, -0.25, 0.75, 0.75]
    centred, _ = ODRPO(ODRPO.Config(min_score=1, max_score=3, scale="none"))(col(1, 2, 3, 3), torch.ones(1), 4)
    torch.testing.assert_close(centred, torch.tensor([-1.25, -0.25, 0.75, 0.75]))


def test_odrpo_unscorable_rows_stay_nan_and_scores_outside_the_range():
    # s = [NaN, 0, 5, 2] with min 1, max 3: 0 passes nothing, 5 passes both thresholds; the NaN row is
    # left out of every group statistic. k=2: b = [., 0, 1, 1] mean 2/3, std sqrt((4/9+1/9+1/9)/2) = 1/sqrt(3)
    # k=3: b = [., 0, 1, 0] mean 1/3, same std.
    s = col(NAN, 0, 5, 2)
    total, m = ODRPO(ODRPO.Config(min_score=1, max_score=3))(s, torch.ones(1), 4)
    sd = 1 / math.sqrt(3) + EPS
    expected = torch.tensor([NAN, (-2 / 3 - 1 / 3) / sd, (1 / 3 + 2 / 3) / sd, (1 / 3 - 1 / 3) / sd])
    torch.testing.assert_close(total, expected, equal_nan=True, rtol=1e-5, atol=1e-6)
    assert m["odrpo/unscorable_frac"] == 0.25
    assert m["odrpo/in_range_frac"] == pytest.approx(1 / 3)  # of the scored [0, 5, 2], only 2 is in 1..3


def test_odrpo_term_binding_and_config_errors():
    combine = ODRPO(ODRPO.Config(term="rubric", min_score=1, max_score=3))
    with pytest.raises(ConfigError, match="Reward terms: format, length"):
        combine.bind(["format", "length"])
    combine.bind(["format", "rubric"])
    terms = torch.tensor([[9.0, 1], [9, 3]])  # the score is column 1, the 9s are ignored
    total, _ = combine(terms, torch.ones(2), 2)
    assert total[1] > 0 > total[0]
    with pytest.raises(ValueError, match="max_score=1 must be larger than min_score=1"):
        ODRPO.Config(min_score=1, max_score=1)


class RaterStub:
    """A judge in scale mode that replies with the given 1-10 ratings, in order (one criterion per completion)."""

    mode = "scale"

    def __init__(self, ratings: list[int]):
        self.ratings, self.stats = ratings, {"calls": 0, "failures": 0, "cache_hits": 0}

    def score(self, prompts: list[str]) -> list[float]:
        assert len(prompts) == len(self.ratings)
        return [(r - 1) / 9 for r in self.ratings]  # judges/base.py parse_scale: s' -> (s' - 1) / 9


def tiered_rubric(tmp_path, ratings: list[int], tiers: int | None = 10) -> Rubric:
    path = tmp_path / "quality.yaml"
    path.write_text("criteria:\n  - {name: quality, text: The response is a correct, clear answer.}\n")
    rubric = Rubric(Rubric.Config(rubric=str(path), tiers=tiers, judge={"backend": "local", "mode": "scale"}))
    rubric.judge = RaterStub(ratings)
    return rubric


def test_odrpo_on_1_10_rubric_tiers_by_hand(tmp_path):
    # Fails on the old code (the rubric had no tiers: its scores were in [0, 1], below every threshold >= 2).
    # A 1-10 rater gives group 1 the ratings [3, 7, 7, 10] and group 2 [5, 5, 5, 5]; reward=rubric with
    # tiers: 10 returns them as the integer tiers. ODRPO, min 1, max 10, thresholds k = 2..10:
    #   group 1: k = 2, 3: b = [1, 1, 1, 1] -> 0.
    #            k = 4..7 (4 thresholds): b = [0, 1, 1, 1], mean 3/4, std 1/2 -> [-.75, .25, .25, .25] / (.5 + eps)
    #            k = 8..10 (3 thresholds): b = [0, 0, 0, 1], mean 1/4, std 1/2 -> [-.25, -.25, -.25, .75] / (.5 + eps)
    #            sum: [4(-.75) + 3(-.25), 4(.25) + 3(-.25), same, 4(.25) + 3(.75)] / (.5 + eps)
    #               = [-3.75, 0.25, 0.25, 3.25] / 0.5001; 7 thresholds vary.
    #   group 2: every threshold is passed by all (k <= 5) or none (k > 5): 0, and none varies.
    ratings = [3, 7, 7, 10, 5, 5, 5, 5]
    rubric = tiered_rubric(tmp_path, ratings)
    scores = rubric(["What is 2 + 2?"] * 8, [f"answer {i}" for i in range(8)], answer=["4"] * 8)
    assert scores == [3.0, 7.0, 7.0, 10.0, 5.0, 5.0, 5.0, 5.0] and rubric.score_range() == (1.0, 10.0)
    odrpo = ODRPO(ODRPO.Config(term="rubric", min_score=1, max_score=10))
    odrpo.bind(["rubric"])
    odrpo.check_range(rubric.score_range())  # the levels fit [1, 10]
    total, m = odrpo(torch.tensor(scores)[:, None], torch.ones(1), 4)
    expected = torch.tensor([-3.75, 0.25, 0.25, 3.25, 0, 0, 0, 0]) / (0.5 + EPS)
    torch.testing.assert_close(total, expected, rtol=1e-5, atol=1e-6)
    assert m["odrpo/active_thresholds"] == pytest.approx((7 + 0) / 2)
    assert m["odrpo/in_range_frac"] == 1.0 and m["odrpo/score_mean"] == pytest.approx(47 / 8)
    # tiers of a mean: 5 tiers, rating 7 -> s = 6/9 -> 1 + floor(4 * 6/9 + 1/2) = 1 + floor(3.1667) = 4
    assert tiered_rubric(tmp_path, [7, 1, 10], tiers=5)(["q"] * 3, ["a"] * 3, answer=["4"] * 3) == [4.0, 1.0, 5.0]
    assert tiered_rubric(tmp_path, [7], tiers=None)(["q"], ["a"], answer=["4"]) == [pytest.approx(6 / 9)]


def test_odrpo_refuses_thresholds_outside_the_declared_range_before_any_model_loads():
    # Fails on the old code (no range was checked: a [0, 1] judge against levels 1..10 trained on zeros).
    from rlpost.app import compose
    from rlpost.build import build_run

    odrpo = ["reward/combine=odrpo", "reward.combine.term=rubric", "reward.combine.min_score=1",
             "reward.combine.max_score=10"]  # fmt: skip
    with pytest.raises(ConfigError, match=r"do not fit reward term 'rubric', whose scores lie in \[0, 1\]: thresholds "
                       r"2, 3, 4, 5, 6, 7, 8, 9, 10 can never vary"):  # fmt: skip
        build_run(compose(["reward=rubric", *odrpo]))
    tiers = ["reward=rubric", "reward.terms.0.params.tiers=10", "reward.terms.0.params.judge.mode=scale"]
    run = build_run(compose([*tiers, *odrpo]))  # levels 1..10 on tiers 1..10; the judge model is not loaded
    assert run.reward.funcs[0].judge._model is None
    with pytest.raises(ConfigError, match=r"whose scores lie in \[1, 10\]: thresholds 1 can never vary"):
        build_run(compose([*tiers, *odrpo, "reward.combine.min_score=0"]))  # level 0 below the lowest tier
    with pytest.raises(ConfigError, match=r"scores lie in \[1, 10\]: thresholds 11, 12 can never vary"):
        build_run(compose([*tiers, *odrpo, "reward.combine.max_score=12"]))
    # term null: the weighted sum's range, 1 x [0, 1] + 0.1 x [0, 1] = [0, 1.1]: levels 0..1 fit, 0..2 do not
    build_run(compose(["reward=math_answer_format", "reward/combine=odrpo"]))
    with pytest.raises(ConfigError, match=r"the weighted sum of the reward terms, whose scores lie in \[0, 1.1\]"):
        build_run(compose(["reward=math_answer_format", "reward/combine=odrpo", "reward.combine.max_score=2"]))
    # the ternary reward scores -1: levels from 0 leave -1 and 0 apart unseen; from -1 they fit
    with pytest.raises(ConfigError, match=r"scores lie in \[-1, 1\]. Set min_score=-1"):
        build_run(compose(["reward=ternary_abstention", "reward/combine=odrpo"]))
    build_run(compose(["reward=ternary_abstention", "reward/combine=odrpo", "reward.combine.min_score=-1"]))


def test_odrpo_raises_at_run_time_when_every_score_is_below_its_levels():
    # Fails on the old code (it returned all-zero advantages). A term that declares no range (a user's callable)
    # is not checked up front; a batch of [0, 1] scores against levels 1..10 passes no threshold: it raises.
    odrpo = ODRPO(ODRPO.Config(min_score=1, max_score=10))
    with pytest.raises(
        ODRPOScoreError, match=r"every scored sample of this batch lies below min_score=1 \(scores 0..0.9"
    ):
        odrpo(col(0.0, 0.5, 0.9, NAN), torch.ones(1), 4)
    # one sample at a level: no error, and in_range_frac says how many were on the ladder
    _, m = odrpo(col(0.0, 0.5, 0.9, 1.0), torch.ones(1), 4)
    assert m["odrpo/in_range_frac"] == 0.25 and m["odrpo/active_thresholds"] == 0.0


# ---- rdpo --------------------------------------------------------------------------------------------


def test_rdpo_quantiles_by_hand():
    # x = [0.1, 0.5, 0.5, 0.9]: mid-ranks 1, 2.5, 2.5, 4 -> u = (2 rank - 1 - 4) / 4 = [-3/4, 0, 0, 3/4]
    # binary [0, 1, 1, 1]: mid-ranks 1, 3, 3, 3 -> [-3/4, 1/4, 1/4, 1/4] = r - mean
    # with a NaN: [NaN, 2, 1] -> n = 2, ranks 2, 1 -> [0 (missing), 1/2, -1/2]
    x = torch.tensor([[[0.1, 0.0], [0.5, 1.0], [0.5, 1.0], [0.9, 1.0]]], dtype=torch.float64)
    torch.testing.assert_close(
        quantiles(x)[0], torch.tensor([[-0.75, -0.75], [0, 0.25], [0, 0.25], [0.75, 0.25]], dtype=torch.float64)
    )
    y = torch.tensor([[[NAN], [2.0], [1.0]]], dtype=torch.float64)
    torch.testing.assert_close(quantiles(y)[0, :, 0], torch.tensor([0.0, 0.5, -0.5], dtype=torch.float64))


def test_rdpo_magnitude_and_pooled_whitening_by_hand():
    # Two groups of 2: [0, 0.2] and [0, 1]. Quantiles +-1/2 in each; magnitude = group range / batch
    # range = 0.2 and 1 -> u = [-0.1, 0.1, -0.5, 0.5]. Pooled Sigma = sum u^2 / (N - groups)
    # = (0.01 * 2 + 0.25 * 2) / 2 = 0.26 -> A = u / (sqrt(0.26) + eps).
    r = col(0, 0.2, 0, 1)
    a, m = RDPO(RDPO.Config())(r, torch.ones(1), 2)
    torch.testing.assert_close(a, torch.tensor([-0.1, 0.1, -0.5, 0.5]) / (math.sqrt(0.26) + EPS))
    assert m["rdpo/active_columns"] == 1.0 and m["rdpo/offdiag_corr"] == 0.0
    assert m["rdpo/quantile_abs_mean"] == pytest.approx(0.3)
    # magnitude none: u = +-1/2 everywhere, Sigma = 0.25 * 4 / 2 = 0.5 -> A = +-0.5 / (sqrt(0.5) + eps)
    b, _ = RDPO(RDPO.Config(magnitude="none"))(r, torch.ones(1), 2)
    torch.testing.assert_close(b, torch.tensor([-0.5, 0.5, -0.5, 0.5]) / (math.sqrt(0.5) + EPS))


def test_rdpo_single_binary_reward_with_group_covariance_is_grpo():
    # u = r - mean (binary quantile), Sigma_group = sum u^2 / (G - 1) = Bessel variance -> z = GRPO.
    r = col(1, 0, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0)  # the last group is constant: 0 in both
    a, _ = RDPO(RDPO.Config(covariance="group"))(r, torch.ones(1), 4)
    torch.testing.assert_close(a, group_advantage(r[:, 0], 4), rtol=1e-5, atol=1e-6)


def test_rdpo_uncorrelated_columns_are_only_rescaled_and_duplicates_count_sqrt2():
    # One group of 4, columns [1,1,0,0] and [1,0,1,0]: u1 = [.5,.5,-.5,-.5], u2 = [.5,-.5,.5,-.5], u1.u2 = 0,
    # Sigma = diag(1/3, 1/3) -> z_j = u_j / (sqrt(1/3) + eps), A = 2 z1 + 1 z2 (weights [2, 1]).
    u1 = torch.tensor([0.5, 0.5, -0.5, -0.5])
    u2 = torch.tensor([0.5, -0.5, 0.5, -0.5])
    terms = torch.tensor([[1.0, 1], [1, 0], [0, 1], [0, 0]])
    a, m = RDPO(RDPO.Config())(terms, torch.tensor([2.0, 1.0]), 4)
    torch.testing.assert_close(a, (2 * u1 + u2) / (math.sqrt(1 / 3) + EPS))
    assert m["rdpo/offdiag_corr"] == pytest.approx(0.0, abs=1e-7) and m["rdpo/active_columns"] == 2.0
    # A duplicated column: Sigma = [[1/3, 1/3], [1/3, 1/3]], eigenvalues 2/3 on (1,1)/sqrt2 and 0
    # (dropped). Sigma^-1/2 = v v^T / (sqrt(2/3) + eps) maps (u, u) to (u, u) / (sqrt(2/3) + eps), so
    # A = 2u / sqrt(2/3) = sqrt(6) u: sqrt(2) times the single column's sqrt(3) u, not twice.
    dup, m_dup = RDPO(RDPO.Config())(torch.stack([terms[:, 0], terms[:, 0]], 1), torch.ones(2), 4)
    single, _ = RDPO(RDPO.Config())(terms[:, :1], torch.ones(1), 4)
    torch.testing.assert_close(dup, 2 * u1 / (math.sqrt(2 / 3) + EPS))
    torch.testing.assert_close(dup / single, torch.full((4,), math.sqrt(2)), rtol=1e-3, atol=0)
    assert m_dup["rdpo/offdiag_corr"] == pytest.approx(1.0)


def test_rdpo_all_nan_row_stays_nan_and_nan_entry_counts_zero():
    # Row 0 has every term NaN; row 1 has column 0 NaN. Column 1 = [., 1, 0, 0]: n = 3, mid-ranks
    # 3, 1.5, 1.5 -> u = [0, 2/3, -1/3, -1/3]; column 0 = [., ., 1, 0] -> u = [0, 0, 1/2, -1/2].
    terms = torch.tensor([[NAN, NAN], [NAN, 1.0], [1.0, 0.0], [0.0, 0.0]])
    a, _ = RDPO(RDPO.Config())(terms, torch.ones(2), 4)
    assert math.isnan(a[0]) and torch.isfinite(a[1:]).all()
    assert a[1] > 0  # it wins column 1 and is missing (0) in column 0


# ---- decoupled (CRPO) --------------------------------------------------------------------------------


def decoupled(**kw) -> Decoupled:
    combine = Decoupled(Decoupled.Config(style_terms=["style"], **kw))
    combine.bind(["task", "style"])
    return combine


def test_decoupled_hand_computed_parts_and_sign_conflicts():
    # task [1,0,0,0]: mean 1/4, std 1/2 -> [3/4, -1/4, -1/4, -1/4] / (1/2 + eps)
    # style [10,0,20,0]: mean 7.5, deviations [2.5,-7.5,12.5,-7.5], std sqrt(275/3) -> dev / (std + eps)
    # Row 2: task -, style + -> 1 of 4 rows in conflict.
    terms = torch.tensor([[1.0, 10], [0, 0], [0, 20], [0, 0]])
    task = torch.tensor([0.75, -0.25, -0.25, -0.25]) / (0.5 + EPS)
    style = torch.tensor([2.5, -7.5, 12.5, -7.5]) / (math.sqrt(275 / 3) + EPS)
    a, m = decoupled()(terms, torch.ones(2), 4)
    torch.testing.assert_close(a, task + style)
    assert m["decoupled/sign_conflict_frac"] == 0.25
    assert m["decoupled/task_abs_mean"] == pytest.approx(float(task.abs().mean()), rel=1e-6)
    b, _ = decoupled(task_weight=2.0, style_weight=0.5)(terms, torch.ones(2), 4)
    torch.testing.assert_close(b, 2 * task + 0.5 * style)
    # The weights of the terms scale a part before its normalization: style x 3 changes nothing.
    c, _ = decoupled()(terms, torch.tensor([1.0, 3.0]), 4)
    torch.testing.assert_close(c, a, rtol=1e-4, atol=1e-5)


def test_decoupled_constant_part_gives_the_other_parts_grpo():
    terms = torch.tensor([[1.0, 5], [0, 5], [1, 5], [1, 5]])
    a, m = decoupled()(terms, torch.ones(2), 4)
    torch.testing.assert_close(a, group_advantage(terms[:, 0], 4))
    assert m["decoupled/style_abs_mean"] == 0.0 and m["decoupled/sign_conflict_frac"] == 0.0


def test_decoupled_unscorable_rows():
    # Row 0 unscorable in both parts -> NaN; row 1 only in style -> its task advantage alone.
    terms = torch.tensor([[NAN, NAN], [1.0, NAN], [0, 1], [0, 0]])
    a, _ = decoupled()(terms, torch.ones(2), 4)
    task = group_advantage(terms[:, 0], 4)
    assert math.isnan(a[0])
    assert a[1] == pytest.approx(float(task[1]))


def test_decoupled_config_errors_name_the_terms():
    with pytest.raises(ConfigError, match="style_terms is empty.*task, style"):
        Decoupled(Decoupled.Config()).bind(["task", "style"])
    with pytest.raises(ConfigError, match="covers every reward term"):
        Decoupled(Decoupled.Config(style_terms=["task", "style"])).bind(["task", "style"])
    with pytest.raises(ConfigError, match="'tone' is not a reward term.*Reward terms: task, style"):
        Decoupled(Decoupled.Config(style_terms=["tone"])).bind(["task", "style"])
    with pytest.raises(RuntimeError, match="bind"):
        Decoupled(Decoupled.Config(style_terms=["style"]))(torch.zeros(2, 2), torch.ones(2), 2)
