"""GEPO (seed 000 #30): hand-worked numbers for group entropy, thresholds, attenuation and the running
history (every number derived in the comments), then 3 real steps and a resume on the tiny model."""

import math

import pytest
import torch
import yaml

from rlpost import cli
from rlpost.advantages.base import ADVANTAGES, GroupBatch
from rlpost.advantages.gepo import GEPO, group_entropy
from rlpost.advantages.group_norm import GroupNorm
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.runs.state import STATE_FILE, load_component_state, save_component_state

from support.trainer import make_run, rlpost_trainer, step_logs, train_rlpost

X = 0.5 / (math.sqrt(0.5) + 1e-4)  # 0.707007: GRPO advantage of rewards [1, 0] (mean .5, unbiased std sqrt(.5))
S23 = math.sqrt(2 / 3)  # 0.816497: population std of [1, 2, 3]


def batch(rewards, g, group_h=None, entropies=None, mask=None):
    """Rewards [N]; per-token entropies either given [N, T] or constant per group (group_h, T = 2)."""
    r = torch.tensor(rewards, dtype=torch.float32)
    n = r.numel()
    if entropies is None:
        entropies = torch.tensor(group_h, dtype=torch.float32).repeat_interleave(g)[:, None].expand(n, 2).clone()
    entropies = torch.as_tensor(entropies, dtype=torch.float32)
    mask = torch.ones_like(entropies) if mask is None else torch.as_tensor(mask, dtype=torch.float32)
    return GroupBatch(
        rewards=r,
        reward_terms=r[:, None],
        term_names=["r"],
        num_generations=g,
        completion_mask=mask,
        completion_ids=torch.zeros(mask.shape, dtype=torch.long),
        extras={"entropies": entropies * mask},  # the trainer's entropies are zero off the mask
    )


def close(a, b):
    torch.testing.assert_close(a, torch.tensor(b, dtype=a.dtype), rtol=1e-6, atol=1e-7)


def test_registered_with_seed_requires_and_one_line_formula():
    assert ADVANTAGES.get("gepo") is GEPO
    assert GEPO.seed == "seed 000 #30" and GEPO.requires == {"entropies"}
    text = GEPO(GEPO.Config()).describe()
    assert "\n" not in text and "x0.5 if A > 0 and H_group < mu - 1 s" in text


# ---- group entropy ------------------------------------------------------------------------------
def test_group_entropy_token_and_sequence_means():
    # G = 2. Group 1: completion a has entropies [1, 2] (a third token off the mask), b has [3].
    #   token:    (1 + 2 + 3) / 3 tokens = 2.0      sequence: mean(1.5, 3) = 2.25
    # Group 2: completion c has [4, 4], d has no valid token.
    #   token:    8 / 2 = 4.0                        sequence: nanmean(4, NaN) = 4.0
    # Group 3: no valid token at all -> NaN either way.
    ent = torch.tensor([[1, 2, 9], [3, 9, 9], [4, 4, 9], [9, 9, 9], [9, 9, 9], [9, 9, 9]], dtype=torch.float32)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.float32)
    tok = group_entropy(ent, mask, 2, "token")
    seq = group_entropy(ent, mask, 2, "sequence")
    close(tok[:2].float(), [2.0, 4.0])
    close(seq[:2].float(), [2.25, 4.0])
    assert math.isnan(tok[2]) and math.isnan(seq[2])


def test_group_entropy_ignores_padding_past_the_mask_width():
    # Gathered entropies may be wider than the mask; the extra columns never count.
    ent = torch.tensor([[1.0, 3.0, 7.0], [2.0, 2.0, 7.0]])
    close(group_entropy(ent, torch.ones(2, 2), 2).float(), [2.0])  # (1 + 3 + 2 + 2) / 4


def test_one_sample_groups_use_each_completions_own_entropy():
    # G = 1 (config enforces G >= 2, the math does not need it): group entropy = sequence entropy,
    # and group_norm gives A = 0 (r - r), so nothing can be attenuated.
    a, m = GEPO(GEPO.Config())(batch([1.0, 0.0, 0.5], 1, group_h=[1.0, 2.0, 3.0]))
    close(a, [0.0, 0.0, 0.0])
    assert m["gepo/group_entropy_min"] == 1.0 and m["gepo/group_entropy_max"] == 3.0
    assert m["gepo/attenuated_frac"] == 0.0  # 0 of 0 nonzero advantages


# ---- attenuation and thresholds ---------------------------------------------------------------
def test_first_step_hand_computed_with_current_batch_thresholds():
    # Rewards [1, 0] in every group: GRPO A = [X, -X]. Group entropies [1, 2, 3].
    # No history -> warmup=current: mu = 2, s = pop std = sqrt(2/3) = 0.8165
    #   low = 2 - 0.8165 = 1.1835, high = 2.8165.
    # Group 1 (H = 1 < low): its positive advantage is halved. Group 3 (H = 3 > high): its negative one.
    gepo = GEPO(GEPO.Config())
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    close(a, [0.5 * X, -X, X, -X, X, -0.5 * X])
    assert m["gepo/threshold_low"] == pytest.approx(2 - S23)
    assert m["gepo/threshold_high"] == pytest.approx(2 + S23)
    assert m["gepo/group_entropy_mean"] == pytest.approx(2.0)
    assert m["gepo/group_entropy_std"] == pytest.approx(S23, rel=1e-6)
    assert (m["gepo/group_entropy_min"], m["gepo/group_entropy_max"]) == (1.0, 3.0)
    assert m["gepo/attenuated_frac"] == pytest.approx(2 / 6)
    assert m["gepo/attenuated_pos_frac"] == pytest.approx(1 / 3)  # 1 of the 3 positive advantages
    assert m["gepo/attenuated_neg_frac"] == pytest.approx(1 / 3)
    assert m["gepo/low_group_frac"] == pytest.approx(1 / 3) and m["gepo/high_group_frac"] == pytest.approx(1 / 3)
    assert m["gepo/base_abs_mean"] == pytest.approx(X, rel=1e-6)
    assert m["advantage/abs_mean"] == pytest.approx(5 * X / 6, rel=1e-6)  # (4 X + 2 * 0.5 X) / 6
    assert m["advantage/mean"] == pytest.approx((0.5 * X - 0.5 * X + 0) / 6, abs=1e-7)
    # The batch then joins the history: S1 = mean(1, 2, 3) = 2, S2 = mean(1, 4, 9) = 14/3.
    assert gepo.state_dict() == {"count": 1, "mean": pytest.approx(2.0), "sq_mean": pytest.approx(14 / 3)}
    assert gepo.history()[1] == pytest.approx(S23)  # sqrt(14/3 - 4)


def test_on_a_mixture_the_shared_thresholds_damp_the_certain_task_and_the_metrics_split_by_source():
    # The first step's batch again (group entropies [1, 2, 3] -> low 1.1835, high 2.8165), the groups from two
    # sources of a data mixture: group 1 (H = 1) is "arith", groups 2 and 3 (H = 2, 3) are "word". The thresholds are
    # the mixture's, shared: only the certain arithmetic group's positive advantage is damped, and only the word
    # problems' high-entropy group's negative one.
    b = batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0])
    b.rows = [{"rlpost_source": s} for s in ["arith"] * 2 + ["word"] * 4]
    a, m = GEPO(GEPO.Config())(b)
    close(a, [0.5 * X, -X, X, -X, X, -0.5 * X])
    assert m["gepo/arith/group_entropy_mean"] == 1.0 and m["gepo/word/group_entropy_mean"] == 2.5
    assert m["gepo/arith/attenuated_frac"] == 0.5  # 1 of arith's 2 nonzero advantages (the positive one)
    assert m["gepo/word/attenuated_frac"] == 0.25  # 1 of word's 4 (group 3's negative one)
    assert (m["gepo/arith/low_group_frac"], m["gepo/arith/high_group_frac"]) == (1.0, 0.0)
    assert (m["gepo/word/low_group_frac"], m["gepo/word/high_group_frac"]) == (0.0, 0.5)
    # rows without the column (a single task), or split_column null: no per-source metrics
    assert not any(k.count("/") > 1 for k in GEPO(GEPO.Config())(batch([1, 0], 2, group_h=[1.0]))[1])
    assert not any(k.startswith("gepo/arith/") for k in GEPO(GEPO.Config(split_column=None))(b)[1])


def test_second_step_scores_against_the_history_then_updates_the_ema():
    gepo = GEPO(GEPO.Config())
    gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    # History: mu = 2, s = 0.8165 -> low 1.1835, high 2.8165. New group entropies [1.5, 2.9, 2.0]:
    # 1.5 is not below 1.1835 (the batch's own thresholds, mean 2.1333 - std 0.5793 = 1.554, would
    # have damped it); 2.9 > 2.8165 damps group 2's negative advantage.
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.5, 2.9, 2.0]))
    close(a, [X, -X, X, -0.5 * X, X, -X])
    assert m["gepo/threshold_low"] == pytest.approx(2 - S23)
    # EMA (momentum 0.9): S1 = 0.9 * 2 + 0.1 * (6.4 / 3) = 2.013333
    #                     S2 = 0.9 * 14/3 + 0.1 * (2.25 + 8.41 + 4) / 3 = 4.2 + 0.488667 = 4.688667
    state = gepo.state_dict()
    assert state["count"] == 2 and m["gepo/history_batches"] == 2.0
    assert state["mean"] == pytest.approx(2.013333, rel=1e-6)
    assert state["sq_mean"] == pytest.approx(4.688667, rel=1e-6)


def test_asymmetric_widths_and_factors():
    # k_low = 0, k_high = 2: low = mu = 2, high = 2 + 2 * 0.8165 = 3.633 (group 3 is no longer high).
    # pos_factor 0.25 on group 1's positive advantage; neg_factor 0 would zero, but nothing is above high.
    gepo = GEPO(GEPO.Config(k_low=0.0, k_high=2.0, pos_factor=0.25, neg_factor=0.0))
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    close(a, [0.25 * X, -X, X, -X, X, -X])  # group 2 sits exactly on low = 2: strict, not damped
    assert m["gepo/threshold_high"] == pytest.approx(2 + 2 * S23)


def test_factor_zero_removes_the_attenuated_advantages():
    gepo = GEPO(GEPO.Config(pos_factor=0.0, neg_factor=0.0))
    a, _ = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    close(a, [0.0, -X, X, -X, X, 0.0])


def test_factors_of_one_are_exactly_the_base_advantage():
    # scale / leave_one_out / eps reach the inner group_norm unchanged.
    b = batch([0.2, 0.9, 0.4, 1.0, 0.0, 0.3, 0.7, 0.1], 4, group_h=[0.5, 3.0])
    cfg = {"scale": "none", "leave_one_out": True, "eps": 1e-3}
    a, m = GEPO(GEPO.Config(pos_factor=1.0, neg_factor=1.0, k_low=0.0, k_high=0.0, **cfg))(b)
    ref, ref_m = GroupNorm(GroupNorm.Config(**cfg))(b)
    torch.testing.assert_close(a, ref, rtol=0, atol=0)
    assert m["advantage/mean"] == ref_m["advantage/mean"] and m["frac_reward_zero_std"] == ref_m["frac_reward_zero_std"]


def test_all_equal_rewards_leave_nothing_to_attenuate_but_feed_the_history():
    gepo = GEPO(GEPO.Config())
    a, m = gepo(batch([0.3, 0.3, 0.7, 0.7], 2, group_h=[1.0, 5.0]))
    close(a, [0.0, 0.0, 0.0, 0.0])
    assert m["gepo/attenuated_frac"] == 0.0 and m["frac_reward_zero_std"] == 1.0
    assert gepo.state_dict()["count"] == 1 and gepo.state_dict()["mean"] == pytest.approx(3.0)


def test_zero_entropy_everywhere_attenuates_nothing():
    # mu = s = 0 -> low = high = 0; H = 0 is neither < 0 nor > 0, on the first and later steps.
    gepo = GEPO(GEPO.Config())
    for _ in range(2):
        a, m = gepo(batch([1, 0, 0, 1], 2, group_h=[0.0, 0.0]))
        close(a, [X, -X, -X, X])
        assert (m["gepo/threshold_low"], m["gepo/threshold_high"], m["gepo/attenuated_frac"]) == (0.0, 0.0, 0.0)
    assert gepo.state_dict() == {"count": 2, "mean": 0.0, "sq_mean": 0.0}


def test_a_group_exactly_on_a_threshold_is_not_attenuated():
    # Group entropies [0, 1]: mu = 0.5, s = 0.5 -> low = 0 and high = 1 exactly: both groups on the edge.
    a, m = GEPO(GEPO.Config())(batch([1, 0, 1, 0], 2, group_h=[0.0, 1.0]))
    close(a, [X, -X, X, -X])
    assert m["gepo/attenuated_frac"] == 0.0


def test_group_without_tokens_is_never_attenuated_nor_recorded():
    # Group 1 has no valid token (NaN entropy); groups 2, 3 have entropies 1 (= (0.5 + 1.5 + 1 + 1) / 4) and 3:
    # mu = 2, s = 1 -> with k = 0.5, low 1.5 and high 2.5.
    mask = [[0, 0], [0, 0], [1, 1], [1, 1], [1, 1], [1, 1]]
    ent = [[9, 9], [9, 9], [0.5, 1.5], [1, 1], [3, 3], [3, 3]]
    gepo = GEPO(GEPO.Config(k_low=0.5, k_high=0.5))
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, entropies=ent, mask=mask))
    close(a, [X, -X, 0.5 * X, -X, X, -0.5 * X])
    assert m["gepo/group_entropy_min"] == 1.0 and m["gepo/group_entropy_mean"] == 2.0
    assert gepo.state_dict()["mean"] == pytest.approx(2.0)  # the NaN group is not in the history


def test_batch_without_any_entropy_is_left_alone():
    gepo = GEPO(GEPO.Config())
    a, m = gepo(batch([1, 0], 2, entropies=[[1, 1], [1, 1]], mask=[[0, 0], [0, 0]]))
    close(a, [X, -X])
    assert "gepo/threshold_low" not in m and gepo.state_dict()["count"] == 0


# ---- warm-up and history --------------------------------------------------------------------------
def test_warmup_off_is_plain_grpo_until_there_is_history():
    gepo = GEPO(GEPO.Config(warmup="off"))
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    close(a, [X, -X, X, -X, X, -X])
    assert "gepo/threshold_low" not in m and m["gepo/attenuated_frac"] == 0.0
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))  # history mu 2, s 0.8165
    close(a, [0.5 * X, -X, X, -X, X, -0.5 * X])


def test_min_history_keeps_the_warmup_rule_for_that_many_batches():
    # min_history = 2: the second batch still uses its own statistics ([1.5, 2.9, 2.0]:
    # mean 2.1333, pop std 0.5793 -> low 1.5540, so 1.5 is damped; high 2.7126, so 2.9 is damped).
    gepo = GEPO(GEPO.Config(min_history=2))
    gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    a, m = gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.5, 2.9, 2.0]))
    h = torch.tensor([1.5, 2.9, 2.0], dtype=torch.float64)
    assert m["gepo/threshold_low"] == pytest.approx(float(h.mean() - h.std(unbiased=False)))
    assert m["gepo/threshold_low"] == pytest.approx(1.5540, abs=1e-4)
    close(a, [0.5 * X, -X, X, -0.5 * X, X, -X])


def test_momentum_zero_keeps_only_the_previous_batch():
    gepo = GEPO(GEPO.Config(momentum=0.0))
    gepo(batch([1, 0], 2, group_h=[5.0]))
    gepo(batch([1, 0, 1, 0], 2, group_h=[1.0, 3.0]))
    assert gepo.state_dict() == {"count": 2, "mean": 2.0, "sq_mean": 5.0}  # mean(1, 9) = 5


def test_state_round_trips_through_a_checkpoint_file(tmp_path):
    gepo = GEPO(GEPO.Config())
    gepo(batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.0, 2.0, 3.0]))
    state = gepo.state_dict()
    assert all(isinstance(v, (int, float)) for v in state.values())  # plain numbers: weights_only loads them
    assert save_component_state([("algorithm.advantage", gepo)], tmp_path) == tmp_path / STATE_FILE
    fresh = GEPO(GEPO.Config())
    assert load_component_state([("algorithm.advantage", fresh)], tmp_path) == ["algorithm.advantage"]
    assert fresh.state_dict() == state
    nxt = batch([1, 0, 1, 0, 1, 0], 2, group_h=[1.5, 2.9, 2.0])
    torch.testing.assert_close(fresh(nxt)[0], gepo(nxt)[0])


def test_missing_entropies_fail_loudly():
    b = batch([1, 0], 2, group_h=[1.0])
    b.extras = {}
    with pytest.raises(RuntimeError, match="entropies"):
        GEPO(GEPO.Config())(b)


@pytest.mark.parametrize(
    "key, value",
    [
        ("pos_factor", 1.5),
        ("neg_factor", -0.1),
        ("k_low", -1.0),
        ("momentum", 1.0),
        ("min_history", 0),
        ("warmup", "never"),
        ("entropy_mean", "median"),
        ("scale", "batchh"),
    ],
)
def test_invalid_config_is_a_config_error(key, value):
    with pytest.raises(ConfigError, match=key):
        build_config(GEPO.Config, {key: value}, "algorithm.advantage")


# ---- configs and the CLI --------------------------------------------------------------------------
def test_bundle_recipe_and_show(monkeypatch, tmp_path, capsys):
    run = build_run(compose(["algorithm=gepo", "algorithm.advantage.k_low=0.5"]))
    assert run.algorithm.name == "gepo" and run.algorithm.advantage.cfg.k_low == 0.5
    assert build_run(compose(["algorithm=gepo", "algorithm/loss=gspo"])).algorithm.loss.registry_name == "gspo"
    monkeypatch.chdir(tmp_path)
    assert cli.main(["show", "recipe=gepo"]) == 0
    out = capsys.readouterr().out
    config = yaml.safe_load(out.split("\nAlgorithm ")[0])
    assert config["algorithm"]["name"] == "gepo" and config["algorithm"]["advantage"]["name"] == "gepo"
    assert config["train"]["steps"] == 20
    assert "Algorithm gepo" in out and "H_group" in out


# ---- real steps on the tiny model -----------------------------------------------------------------
def test_three_steps_log_gepo_metrics_attenuate_and_resume(tmp_path):
    # 4 groups of 2 per step; with k = 0.5 some group always lies beyond a threshold (4 values cannot
    # all be within half a std of their mean), and hashed rewards make its advantages nonzero.
    overrides = [
        "algorithm=gepo",
        "train.num_generations=2",
        "algorithm.advantage.k_low=0.5",
        "algorithm.advantage.k_high=0.5",
        "train.save_steps=1",
    ]
    trainer = train_rlpost(make_run(overrides), tmp_path / "a")
    logs = step_logs(trainer)
    assert len(logs) == 3
    for key in (
        "group_entropy_mean",
        "group_entropy_min",
        "group_entropy_max",
        "threshold_low",
        "threshold_high",
        "attenuated_frac",
        "attenuated_pos_frac",
        "attenuated_neg_frac",
    ):
        values = [log[f"rlpost/gepo/{key}"] for log in logs]
        assert all(math.isfinite(v) for v in values), key
    for log in logs:
        assert (
            log["rlpost/gepo/group_entropy_min"]
            <= log["rlpost/gepo/group_entropy_mean"]
            <= log["rlpost/gepo/group_entropy_max"]
        )
        assert log["rlpost/gepo/threshold_low"] <= log["rlpost/gepo/threshold_high"]
        assert log["rlpost/gepo/group_entropy_min"] > 0  # a random model's tokens are far from certain
    assert max(log["rlpost/gepo/attenuated_frac"] for log in logs) > 0, "GEPO attenuated no advantage"
    assert any(log["rlpost/advantage/abs_mean"] < log["rlpost/gepo/base_abs_mean"] for log in logs)

    gepo = trainer.run.algorithm.advantage
    assert gepo.state_dict()["count"] == 3
    saved = torch.load(tmp_path / "a" / "checkpoint-3" / STATE_FILE, weights_only=True)
    assert saved["algorithm.advantage"] == gepo.state_dict()

    # Resume from step 2: the history of 2 batches is restored, step 3 adds the third.
    resumed = make_run(overrides)
    again = rlpost_trainer(resumed, tmp_path / "a")
    again.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-2"))
    assert [log["step"] for log in step_logs(again)] == [1, 2, 3]
    assert resumed.algorithm.advantage.state_dict()["count"] == 3  # 1 if the state had not been restored
    assert step_logs(again)[2]["rlpost/gepo/history_batches"] == 3.0
