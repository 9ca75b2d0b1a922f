"""The seed advantages hargo (000 #14) and tiar + ternary_abstention (004 #7): hand-worked numbers (derived
in the comments), edge cases and config errors, and the registration of every seed advantage (the token-level
ones, routed, segments and pmi_tokens, are in test_token_credit.py; 2 real trainer steps each:
test_advantages_seeds_trainer.py)."""

import math

import pytest
import torch

from rlpost.advantages.base import ADVANTAGES
from rlpost.advantages.hargo import HARGO
from rlpost.advantages.pmi_tokens import PMITokens
from rlpost.advantages.routed import Routed
from rlpost.advantages.segments import Segments
from rlpost.advantages.tiar import TIAR
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.ternary_abstention import TernaryAbstention
from rlpost.run import REFERENCE_ONLY_BETA
from rlpost.tools import listing

from support.advantages import X, batch, close, grpo


def test_registered_with_seed_references_in_rlpost_list():
    rows = {(kind, name): seed for kind, name, _, seed in listing.rows()}
    assert rows[("advantage", "hargo")] == "seed 000 #14"
    assert rows[("advantage", "tiar")] == "seed 004 #7"
    assert rows[("advantage", "routed")] == "seed 000 #11"
    assert rows[("advantage", "segments")] == "seed 000 #10"
    assert rows[("advantage", "pmi_tokens")] == "seed 000 #22"
    assert rows[("reward", "ternary_abstention")] == "seed 004 #7"
    for name in ("hargo", "tiar", "routed", "segments", "pmi_tokens"):
        cls = ADVANTAGES.get(name)
        assert "\n" not in cls(cls.Config()).describe()


# ---- HARGO ------------------------------------------------------------------------------------
def hargo_batch(rewards, probs, g=2, key="ref_logps"):
    # per-token log-probs constant per completion (2 tokens): C_i = exp(mean log p) = p_i; under the reference
    # model by default (HARGO's default confidence_source), the rollout policy's with key="logps"
    logps = torch.tensor(probs).log()[:, None].expand(-1, 2).clone()
    return batch(rewards, g, extras={key: logps})


def test_hargo_hand_computed_weights():
    # G = 2, rewards [1, 0] -> GRPO A = [X, -X]; D = range 1 / reward_range 1 = 1.
    # C = [0.25, 0.8]; m = [1 - 0.25, 0.8] = [0.75, 0.8] (success: surprise, failure: confidence).
    # w = 2 softmax([0.75, 0.8]) = [2 / (1 + e^0.05), 2 e^0.05 / (1 + e^0.05)] = [0.975006, 1.024994]
    w1 = 2 / (1 + math.exp(0.05))
    a, m = HARGO(HARGO.Config())(hargo_batch([1, 0], [0.25, 0.8]))
    close(a, [w1 * X, -(2 - w1) * X])
    rollout = HARGO(HARGO.Config(confidence_source="rollout"))  # the same C from the rollout policy's log-probs
    close(rollout(hargo_batch([1, 0], [0.25, 0.8], key="logps"))[0], [w1 * X, -(2 - w1) * X])
    assert w1 == pytest.approx(0.975006, abs=1e-6)
    assert m["hargo/discrimination_mean"] == 1.0
    assert m["hargo/confidence_mean"] == pytest.approx((0.25 + 0.8) / 2)
    assert m["hargo/weight_max"] == pytest.approx(2 - w1, rel=1e-6)
    assert m["hargo/base_abs_mean"] == pytest.approx(X, rel=1e-6)


def test_hargo_discrimination_and_temperature_sharpen_or_flatten():
    # reward_range 2 -> D = 0.5: logits [0.375, 0.4] -> w1 = 2 / (1 + e^0.025) = 0.987503
    a, _ = HARGO(HARGO.Config(reward_range=2.0))(hargo_batch([1, 0], [0.25, 0.8]))
    close(a, [0.987503 * X, -1.012497 * X])
    # temperature 0.05 -> logits [15, 16]: w1 = 2 / (1 + e) = 0.537883
    a, _ = HARGO(HARGO.Config(temperature=0.05))(hargo_batch([1, 0], [0.25, 0.8]))
    close(a, [0.537883 * X, -1.462117 * X])


def test_hargo_equal_signals_all_equal_rewards_and_one_sample_groups_are_grpo():
    # C = [0.5, 0.5]: m = [0.5, 0.5] -> uniform weights: GRPO exactly.
    b = hargo_batch([1, 0], [0.5, 0.5])
    torch.testing.assert_close(HARGO(HARGO.Config())(b)[0], grpo(b))
    # all-equal rewards: A = 0 whatever the weights, D = 0
    a, m = HARGO(HARGO.Config())(hargo_batch([0.3, 0.3], [0.1, 0.9]))
    close(a, [0.0, 0.0])
    assert m["hargo/discrimination_mean"] == 0.0 and m["hargo/weight_max"] == 1.0
    # G = 1: r - r = 0
    a, _ = HARGO(HARGO.Config())(hargo_batch([1.0, 0.0], [0.2, 0.7], g=1))
    close(a, [0.0, 0.0])


def test_hargo_reads_ref_logps_by_default_and_the_run_loads_a_reference_without_a_kl():
    hargo = HARGO(HARGO.Config())  # the abstract's confidence: the reference model's
    assert hargo.requires == {"ref_logps"} and HARGO(HARGO.Config(confidence_source="rollout")).requires == {"logps"}
    with pytest.raises(RuntimeError, match="ref_logps"):
        hargo(hargo_batch([1, 0], [0.25, 0.8], key="logps"))
    run = build_run(compose(["algorithm/advantage=hargo"]))
    assert run.needs_reference and run.algorithm.regularizers == []  # a reference, but no KL term in the loss
    assert run.grpo_config_kwargs("out")["beta"] == REFERENCE_ONLY_BETA  # TRL loads and scores the reference
    with_kl = build_run(compose(["algorithm/advantage=hargo", "algorithm.kl.coef=0.04"]))
    assert with_kl.grpo_config_kwargs("out")["beta"] == 0.04
    rollout = build_run(compose(["algorithm/advantage=hargo", "algorithm.advantage.confidence_source=rollout"]))
    assert not rollout.needs_reference and rollout.grpo_config_kwargs("out")["beta"] == 0.0


# ---- ternary_abstention + TIAR -------------------------------------------------------------------
def test_ternary_abstention_reward():
    reward = TernaryAbstention(TernaryAbstention.Config())
    texts = ["42", "I don't know", "41", "I'm not sure, maybe 42", "<think>I don't know</think> 42", "x", "7"]
    golds = ["42", "42", "42", "42", "42", "42", None]
    # correct 1, abstain 0 (hedging abstains), wrong -1, strip_think reads only the answer, no gold -> None
    assert reward([""] * 7, texts, answer=golds) == [1.0, 0.0, -1.0, 0.0, 1.0, -1.0, None]
    exact = TernaryAbstention(TernaryAbstention.Config(match="exact", correct=2.0, wrong=-3.0))
    assert exact(["", ""], [" Paris ", "Lyon"], answer=["paris", "Paris"]) == [2.0, -3.0]
    assert reward.score_range() == (-1.0, 1.0) and exact.score_range() == (-3.0, 2.0)


def test_ternary_abstention_scores_unanswerable_rows_abstaining_as_correct():
    # Fails on the old reward (a row with no gold was unscorable: None, so abstaining was never rewarded).
    # unanswerable rows: abstaining is right (+1), any answer wrong (-1), whatever the gold column says;
    # answerable rows as before. The column's text forms count too ("true", "yes", 1).
    reward = TernaryAbstention(TernaryAbstention.Config())
    texts = ["I don't know", "12", "I don't know", "12", "not enough information here", "5"]
    golds = ["None", "None", "12", "12", None, "None"]
    flags = [True, True, False, False, "yes", 1]
    assert reward([""] * 6, texts, answer=golds, unanswerable=flags) == [1.0, -1.0, 0.0, 1.0, 1.0, -1.0]
    # what abstention F1 counts: (abstained, should have abstained) per sample
    assert reward.abstention(texts, answer=golds, unanswerable=flags) == [
        (True, True), (False, True), (True, False), (False, False), (True, True), (False, True),
    ]  # fmt: skip
    # a batch without the column: every row answerable (reasoning-gym tasks); unanswerable_column=null ignores it
    assert reward([""] * 2, ["I don't know", "12"], answer=["12", "12"]) == [0.0, 1.0]
    ignore = TernaryAbstention(TernaryAbstention.Config(unanswerable_column=None))
    assert ignore([""], ["I don't know"], answer=["None"], unanswerable=[True]) == [None]


def test_ternary_abstention_config_errors():
    with pytest.raises(ConfigError, match="wrong < abstain < correct"):
        build_config(TernaryAbstention.Config, {"abstain": 2.0}, "reward.terms[0].params")
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.abstain_patterns: bad regex"):
        build_run(compose(["reward=ternary_abstention", "reward.terms.0.params.abstain_patterns=['(']"]))


def bound_tiar(**cfg):
    tiar = TIAR(TIAR.Config(**cfg))
    tiar.bind(["ternary_abstention"], [TernaryAbstention(TernaryAbstention.Config())])
    return tiar


S3 = math.sqrt(1 / 3) + 1e-4  # std + eps of a group [0, 0, -1, -1] (unbiased var 1/3)


def test_tiar_reweights_the_abstentions_of_a_never_correct_group_which_grpo_cannot():
    # Fails on the old TIAR (it shifted the abstention reward before the std normalisation, an affine change
    # of a two-level group, so its advantages were GRPO's).
    # [abstain, abstain, wrong, wrong]: GRPO A = [x, x, -x, -x], x = 0.5 / S3 = 0.865875.
    # c = 0 correct / 4 = 0 -> d = (0.5 - 0) / 0.5 = 1 -> abstentions A' = x + 1 * 1 * |x| = 2x; wrong rows keep -x.
    b = batch([0, 0, -1, -1], 4)
    x = 0.5 / S3
    close(grpo(b), [x, x, -x, -x])
    a, m = bound_tiar()(b)
    close(a, [2 * x, 2 * x, -x, -x])
    assert m["tiar/abstain_weight_mean"] == pytest.approx(2.0) and m["tiar/confidence_mean"] == 0.0
    # pivot 0.25: d = 0.25 / max(0.25, 0.75) = 1/3 -> weight 4/3; strength 0.5: weight 1.5; strength 0: GRPO
    close(bound_tiar(pivot=0.25)(b)[0], [4 / 3 * x, 4 / 3 * x, -x, -x])
    close(bound_tiar(strength=0.5)(b)[0], [1.5 * x, 1.5 * x, -x, -x])
    torch.testing.assert_close(bound_tiar(strength=0.0)(b)[0], grpo(b))


def test_tiar_hand_computed():
    # Group 1 [1, 1, 1, 0] (sure: c = 3/4, d = (0.5 - 0.75) / 0.5 = -0.5): mean 0.75, deviations
    #   [.25, .25, .25, -.75], unbiased var 0.75 / 3 = 0.25, std 0.5: A = [.25, .25, .25, -.75] / 0.5001;
    #   the abstention lost to its group (A < 0) and the policy knows the answer: A' = A + (-0.5)|A| = 1.5 A.
    # Group 2 [1, 0, -1, -1] (unsure: c = 1/4, d = 0.5): mean -0.25, deviations [1.25, .25, -.75, -.75],
    #   var 2.75 / 3, std 0.957427: the abstention beat its group (A > 0): A' = A + 0.5 |A| = 1.5 A.
    a, m = bound_tiar()(batch([1, 1, 1, 0, 1, 0, -1, -1], 4))
    s1, s2 = 0.5 + 1e-4, math.sqrt(2.75 / 3) + 1e-4
    close(a, [0.25 / s1, 0.25 / s1, 0.25 / s1, -1.5 * 0.75 / s1, 1.25 / s2, 1.5 * 0.25 / s2, -0.75 / s2, -0.75 / s2])
    assert m["tiar/abstain_frac"] == pytest.approx(2 / 8)
    assert m["tiar/confidence_mean"] == pytest.approx(0.5)
    assert m["tiar/abstain_weight_mean"] == pytest.approx(1.5)
    assert m["tiar/abstain_adv_mean"] == pytest.approx((-1.125 / s1 + 0.375 / s2) / 2, rel=1e-5)
    assert m["advantage/abs_mean"] == pytest.approx(a.abs().mean().item())


def test_tiar_answered_accuracy_pivot_and_unanswerable_groups():
    # [1, 0, -1, -1] (group 2 above): correct_frac 1/4 -> d = 0.5 (weight 1.5); answered_accuracy 1/3 (1 correct
    # of 3 answered) -> d = (0.5 - 1/3) / 0.5 = 1/3: the abstention's A > 0 is weighted 4/3.
    b = batch([1, 0, -1, -1], 4)
    s = math.sqrt(2.75 / 3) + 1e-4
    close(bound_tiar(confidence="answered_accuracy")(b)[0], [1.25 / s, 4 / 3 * 0.25 / s, -0.75 / s, -0.75 / s])
    # nothing answered: c = 0 by convention, but every row abstains: A = 0 everywhere
    close(bound_tiar(confidence="answered_accuracy")(batch([0, 0], 2))[0], [0.0, 0.0])
    # an unanswerable group: its abstentions score `correct` (1), answers `wrong`: no abstain value, GRPO
    u = batch([1, -1, -1, -1], 4)
    torch.testing.assert_close(bound_tiar()(u)[0], grpo(u))


def test_tiar_on_a_multi_term_reward_reweights_the_combined_advantage():
    # terms [ternary, bonus], weights [2, 1]: r = [2 * 0 + 0.3, 2 * -1 + 0] = [0.3, -2]; GRPO A = [y, -y],
    # y = 1.15 / (std([0.3, -2]) + 1e-4), std = 2.3 / sqrt(2); c = 0 -> the abstention's A doubles.
    tiar = TIAR(TIAR.Config())
    tiar.bind(["ternary_abstention", "bonus"], [TernaryAbstention(TernaryAbstention.Config()), None])
    b = batch([[0, 0.3], [-1, 0]], 2, weights=[2.0, 1.0])
    close(b.rewards, [0.3, -2.0])
    y = 1.15 / (2.3 / math.sqrt(2) + 1e-4)
    close(tiar(b)[0], [2 * y, -y])


def test_tiar_config_errors():
    with pytest.raises(ConfigError, match=r"algorithm.advantage.term='ternary_abstention' is not a reward term"):
        build_run(compose(["algorithm/advantage=tiar"]))
    with pytest.raises(ConfigError, match="must be a ternary_abstention reward"):
        build_run(compose(["algorithm/advantage=tiar", "algorithm.advantage.term=math_answer"]))
    with pytest.raises(ConfigError, match="tiar needs reward.combine=weighted_sum"):
        build_run(compose(["algorithm/advantage=tiar", "reward=ternary_abstention", "reward/combine=rdpo"]))


@pytest.mark.parametrize(
    "cls, key, value",
    [
        (PMITokens, "clip", 0.0),
        (HARGO, "temperature", 0.0),
        (HARGO, "confidence_source", "label"),
        (TIAR, "confidence", "vote"),
        (Routed, "routes", []),
        (Segments, "stages", []),
    ],
)
def test_invalid_config_is_a_config_error(cls, key, value):
    with pytest.raises(ConfigError):
        build_config(cls.Config, {key: value}, "algorithm.advantage")
