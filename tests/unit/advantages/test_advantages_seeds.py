"""The seed advantages hargo (000 #14), tiar + ternary_abstention (004 #7), routed (000 #11),
segments (000 #10) and pmi_tokens (000 #22): hand-worked numbers (derived in the comments), edge
cases and config errors (2 real trainer steps each: test_advantages_seeds_trainer.py)."""

import math

import pytest
import torch

from rlpost import listing
from rlpost.advantages.base import ADVANTAGES, GroupBatch
from rlpost.advantages.group_norm import GroupNorm
from rlpost.advantages.hargo import HARGO
from rlpost.advantages.pmi_tokens import PMITokens
from rlpost.advantages.routed import Route, Routed
from rlpost.advantages.segments import Segments, StageTerm
from rlpost.advantages.spans import compile_span, span_mask, stage_index
from rlpost.advantages.tiar import TIAR
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.errors import ConfigError
from rlpost.rewards.ternary_abstention import TernaryAbstention
from rlpost.run import REFERENCE_ONLY_BETA
from rlpost.schema import build_config

X = 0.5 / (math.sqrt(0.5) + 1e-4)  # 0.707007: GRPO advantage of rewards [1, 0] (mean .5, unbiased std sqrt(.5))
XH = 0.25 / (0.5 * math.sqrt(0.5) + 1e-4)  # 0.706907: of rewards [0.5, 0]; TRL's std + 1e-4 makes it not quite X


def batch(terms, g, names=None, weights=None, rewards=None, ids=None, mask=None, text=None, extras=None):
    """reward_terms [N, R] (or [N]); rewards = the weighted sum of the terms unless given."""
    t = torch.tensor(terms, dtype=torch.float32)
    t = t[:, None] if t.dim() == 1 else t
    w = torch.ones(t.size(1)) if weights is None else torch.tensor(weights)
    r = (t * w).sum(1) if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    width = len(text[0]) if text else (len(ids[0]) if ids else 2)
    ids = torch.zeros(t.size(0), width, dtype=torch.long) if ids is None else torch.tensor(ids)
    mask = torch.ones(ids.shape) if mask is None else torch.tensor(mask, dtype=torch.float32)
    return GroupBatch(
        rewards=r,
        reward_terms=t,
        term_names=names or [f"t{j}" for j in range(t.size(1))],
        num_generations=g,
        completion_mask=mask,
        completion_ids=ids,
        token_text=text or [],
        extras=extras or {},
    )


def close(a, b, tol=1e-6):
    torch.testing.assert_close(a.float(), torch.tensor(b, dtype=torch.float32), rtol=tol, atol=1e-6)


def grpo(b):
    return GroupNorm(GroupNorm.Config())(b)[0]


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


def test_ternary_abstention_config_errors():
    with pytest.raises(ConfigError, match="wrong < abstain < correct"):
        build_config(TernaryAbstention.Config, {"abstain": 2.0}, "reward.terms[0].params")
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.abstain_patterns: bad regex"):
        build_run(compose(["reward=ternary_abstention", "reward.terms.0.params.abstain_patterns=['(']"]))


def bound_tiar(**cfg):
    tiar = TIAR(TIAR.Config(**cfg))
    tiar.bind(["ternary_abstention"], [TernaryAbstention(TernaryAbstention.Config())], torch.ones(1))
    return tiar


def test_tiar_hand_computed():
    # Group 1 [1, 0, -1, -1]: 1 correct of 4 -> c = 1/4 -> a = 0.5 + (-0.5 - 0.5) * 0.25 = 0.25,
    #   r' = [1, 0.25, -1, -1], mean -0.1875, deviations [1.1875, 0.4375, -0.8125, -0.8125],
    #   unbiased var (1.41016 + 0.19141 + 0.66016 + 0.66016) / 3 = 0.973958, std 0.986893.
    # Group 2 [0, 0, -1, -1]: c = 0 -> a = 0.5: r' = [0.5, 0.5, -1, -1] (mean -0.25, std sqrt(0.75)).
    a, m = bound_tiar()(batch([1, 0, -1, -1, 0, 0, -1, -1], 4))
    s1, s2 = math.sqrt(2.921875 / 3) + 1e-4, math.sqrt(0.75) + 1e-4
    close(a, [1.1875 / s1, 0.4375 / s1, -0.8125 / s1, -0.8125 / s1, 0.75 / s2, 0.75 / s2, -0.75 / s2, -0.75 / s2])
    assert m["tiar/abstain_frac"] == pytest.approx(3 / 8)
    assert m["tiar/confidence_mean"] == pytest.approx(0.125)
    assert m["tiar/abstain_reward_mean"] == pytest.approx((0.25 + 0.5 + 0.5) / 3)


def test_tiar_two_levels_in_a_group_are_an_affine_change_grpo_cannot_see():
    # Group 2 above has only abstain and wrong: moving the abstain value 0 -> 0.5 is affine within
    # the group, so its std-normalized advantages equal GRPO's on the raw ternary reward; without the
    # std division (scale none) they do not: 0.5 + 1 = 1.5 apart instead of 1.
    # (equal up to TRL's 1e-4 in std + 1e-4: std 0.866 vs 0.577 -> a relative 6e-5 apart)
    b = batch([0, 0, -1, -1], 4)
    torch.testing.assert_close(bound_tiar()(b)[0], grpo(b), rtol=2e-4, atol=1e-6)
    close(bound_tiar(scale="none")(b)[0], [0.75, 0.75, -0.75, -0.75])  # r' = [.5, .5, -1, -1] - (-0.25)


def test_tiar_answered_accuracy_and_static_ternary():
    # [1, 0, 0, -1]: correct_frac 1/4 -> a = 0.25; answered_accuracy 1/2 (1 correct of 2 answered) -> a = 0,
    # which is the static ternary reward: GRPO on the raw values.
    b = batch([1, 0, 0, -1], 4)
    torch.testing.assert_close(bound_tiar(confidence="answered_accuracy")(b)[0], grpo(b))
    torch.testing.assert_close(
        bound_tiar(unsure=0.0, sure=0.0)(batch([1, 0, -1, -1], 4))[0], grpo(batch([1, 0, -1, -1], 4))
    )
    # nothing answered: answered_accuracy c = 0 -> a = 0.5 on every row: all equal, A = 0
    close(bound_tiar(confidence="answered_accuracy")(batch([0, 0], 2))[0], [0.0, 0.0])


def test_tiar_uses_the_term_weight_on_a_multi_term_reward():
    # terms [ternary, bonus], weights [2, 1]: r = 2 t + bonus = [2, 0 + 0.3] ; c = 1/2 -> a = 0 -> r' unchanged.
    # With c = 0 ([0, -1] ternary, bonus [0.3, 0]): a = 0.5, r = [0.3, -2] -> r' = [0.3 + 2 * 0.5, -2] = [1.3, -2].
    tiar = TIAR(TIAR.Config())
    tiar.bind(
        ["ternary_abstention", "bonus"], [TernaryAbstention(TernaryAbstention.Config()), None], torch.tensor([2.0, 1.0])
    )
    b = batch([[0, 0.3], [-1, 0]], 2, weights=[2.0, 1.0])
    close(b.rewards, [0.3, -2.0])
    a, _ = tiar(b)
    torch.testing.assert_close(a, grpo(batch([1.3, -2.0], 2)))


def test_tiar_config_errors():
    with pytest.raises(ConfigError, match=r"algorithm.advantage.term='ternary_abstention' is not a reward term"):
        build_run(compose(["algorithm/advantage=tiar"]))
    with pytest.raises(ConfigError, match="must be a ternary_abstention reward"):
        build_run(compose(["algorithm/advantage=tiar", "algorithm.advantage.term=math_answer"]))
    with pytest.raises(ConfigError, match="tiar needs reward.combine=weighted_sum"):
        build_run(compose(["algorithm/advantage=tiar", "reward=ternary_abstention", "reward/combine=rdpo"]))


# ---- spans -------------------------------------------------------------------------------------------
def test_span_masks_from_token_pieces():
    pieces = ["<think>", "hm", "</th", "ink>", " 4", "<|im_end|>"]
    assert span_mask(pieces, compile_span("tag:think")).tolist() == [True, True, True, True, False, False]
    assert span_mask(["<think>", "cut off"], compile_span("tag:think")).tolist() == [True, True]  # unclosed
    assert span_mask(pieces, compile_span(r"re:\d")).tolist() == [False, False, False, False, True, False]
    assert compile_span("rest") is None and compile_span("all") is None
    for bad in ("think", "tag:", "re:(", "xml:think"):
        with pytest.raises(ValueError, match="span"):
            compile_span(bad)


def test_stage_index_splits_at_markers_even_across_tokens():
    # "pre" is before any marker (-1); a marker's own tokens open its stage; "<ans" + "wer>" is one marker.
    assert stage_index(["pre", "<think>", "a", "<ans", "wer>", "4"], ["<think>", "<answer>"]).tolist() == [
        -1,
        0,
        0,
        1,
        1,
        1,
    ]
    assert stage_index(["<answer>", "1", "<think>", "<answer>"], ["<think>", "<answer>"]).tolist() == [1, 1, 0, 1]


# ---- routed (ALPO) -------------------------------------------------------------------------------------
TEXT = [["<think>", "hm", "</think>", " 4"], ["<think>", "x", "</think>", " 5"]]


def routed(routes, names=("math", "fmt"), weights=(1.0, 0.5), **cfg):
    r = Routed(Routed.Config(routes=[Route(t, s) for t, s in routes], **cfg))
    r.bind(list(names), torch.tensor(weights))
    return r


def test_routed_hand_computed():
    # math [1, 0] -> A^math = [X, -X]; fmt [0, 1] weight 0.5 -> A^fmt = 0.5 * [-X, X].
    # fmt -> <think> span (tokens 0-2), math -> rest (token 3).
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=TEXT)
    a, m = routed([("fmt", "tag:think"), ("math", "rest")])(b)
    h = 0.5 * X
    close(a, [[-h, -h, -h, X], [h, h, h, -X]])
    assert m["routed/fmt_token_frac"] == 0.75 and m["routed/math_token_frac"] == 0.25
    assert m["routed/unrouted_token_frac"] == 0.0


def test_routed_overlap_sums_and_unrouted_tokens():
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=TEXT)
    h = 0.5 * X
    # math on all tokens + fmt on <think>: think tokens carry both (X - h = 0.5 X), the answer only math.
    a, _ = routed([("math", "all"), ("fmt", "tag:think")])(b)
    close(a, [[X - h, X - h, X - h, X], [h - X, h - X, h - X, -X]])
    # only fmt routed: the answer token is unrouted -> GRPO of the combined reward r = [1, 0.5] -> [XH, -XH]
    a, m = routed([("fmt", "tag:think")])(b)
    close(a, [[-h, -h, -h, XH], [h, h, h, -XH]])
    assert m["routed/unrouted_token_frac"] == 0.25
    a, _ = routed([("fmt", "tag:think")], unrouted="zero")(b)
    close(a, [[-h, -h, -h, 0.0], [h, h, h, 0.0]])


def test_routed_one_term_on_all_tokens_is_grpo_and_equal_rewards_give_zero():
    b = batch([1, 0, 0, 1], 2, names=["math"], text=TEXT * 2)
    a, _ = routed([("math", "all")], names=["math"], weights=[1.0])(b)
    torch.testing.assert_close(a, grpo(b).unsqueeze(1).expand(4, 4))
    a, _ = routed([("math", "all")], names=["math"], weights=[1.0])(batch([1, 1, 0, 0], 2, text=TEXT * 2))
    close(a, [[0.0] * 4] * 4)


def test_routed_errors():
    with pytest.raises(RuntimeError, match="token_text"):
        routed([("math", "all")])(batch([[1, 0], [0, 1]], 2))
    with pytest.raises(
        ConfigError, match=r"algorithm.advantage.routes\[1\].term='nope' is not a reward term.*math_answer, format"
    ):
        build_run(
            compose(
                ["algorithm/advantage=routed", "reward=math_answer_format", "algorithm.advantage.routes.1.term=nope"]
            )
        )
    with pytest.raises(ConfigError, match=r"routes\[0\].span: span 'think'"):
        build_run(
            compose(
                ["algorithm/advantage=routed", "reward=math_answer_format", "algorithm.advantage.routes.0.span=think"]
            )
        )


# ---- segments (StructPO) --------------------------------------------------------------------------------
STAGED = [["pre", "<think>", "a", "<answer>", "4"], ["pre", "<think>", "b", "<answer>", "5"]]


def segments(local=(("<answer>", "math"),), names=("math", "fmt"), weights=(1.0, 0.5), **cfg):
    s = Segments(Segments.Config(local=[StageTerm(st, t) for st, t in local], **cfg))
    s.bind(list(names), torch.tensor(weights))
    return s


def test_segments_hand_computed():
    # math [1, 0] is the <answer> stage's local term: w 1 * GRPO = [X, -X]; global = every other term,
    # GRPO(0.5 * fmt) with fmt [0, 1] = [-XH, XH] (the weight is applied before the std). global_weight 1,
    # local_weight 2:
    #   completion 1: pre, <think>, a -> -XH;  <answer>, 4 -> -XH + 2X
    #   completion 2: XH, XH, XH;              <answer>, 5 -> XH - 2X
    b = batch([[1, 0], [0, 1]], 2, weights=[1.0, 0.5], text=STAGED)
    a, m = segments(local_weight=2.0)(b)
    lo, hi = 2 * X - XH, XH - 2 * X
    close(a, [[-XH, -XH, -XH, lo, lo], [XH, XH, XH, hi, hi]])
    assert m["segments/local_token_frac"] == pytest.approx(0.4)
    assert m["segments/stages_found_mean"] == 2.0
    assert m["segments/global_abs_mean"] == pytest.approx(XH, rel=1e-6)


def test_segments_without_local_terms_is_grpo_and_needs_a_global_term():
    b = batch([[1, 0.2], [0, 0.6]], 2, weights=[1.0, 0.5], text=STAGED)
    a, _ = segments(local=())(b)
    torch.testing.assert_close(a, grpo(b).unsqueeze(1).expand(2, 5))  # global = all terms = the combined reward
    with pytest.raises(ConfigError, match="global_terms is empty"):
        segments(local=(("<answer>", "math"),), names=("math",), weights=(1.0,))
    with pytest.raises(ConfigError, match=r"local\[0\].stage='<end>' is not in stages"):
        build_config(Segments.Config, {"local": [{"stage": "<end>", "term": "math"}]}, "algorithm.advantage")


# ---- pmi_tokens (P-GRPO) ---------------------------------------------------------------------------------
def pmi_batch(mask=None):
    # G = 2, rewards [1, 0] -> A = [X, -X]; token ids: success [5, 6], failure [5, 7] (a third, masked column)
    return batch([1, 0], 2, ids=[[5, 6, 6], [5, 7, 6]], mask=mask or [[1, 1, 0], [1, 1, 0]])


def test_pmi_tokens_hand_computed_without_smoothing():
    # Group counts: 5 x2, 6 x1, 7 x1 (n = 4); success set: 5, 6 (n_P = 2). The masked 6 is not counted.
    # PMI(5) = log (1/2) / (2/4) = 0, PMI(6) = log (1/2) / (1/4) = log 2 -> u = [1, 2], mean 1.5 -> w = [2/3, 4/3].
    # The failure set (5, 7) is the mirror image: w = [2/3, 4/3] on [5, 7].
    a, m = PMITokens(PMITokens.Config(smoothing=0.0, ramp_steps=0))(pmi_batch())
    close(a, [[2 * X / 3, 4 * X / 3, X], [-2 * X / 3, -4 * X / 3, -X]])
    assert m["pmi/strength"] == 1.0 and m["pmi/weight_max"] == pytest.approx(4 / 3)


def test_pmi_tokens_smoothing_clip_and_ramp():
    # Laplace a = 1, V = 3 distinct ids: p_P(5) = 2/5, p_all(5) = 3/7 -> u = 14/15; p_P(6) = 2/5, p_all(6) = 2/7 -> u = 1.4;
    # mean (14/15 + 1.4) / 2 = 7/6 -> w = [0.8, 1.2].
    a, _ = PMITokens(PMITokens.Config(ramp_steps=0))(pmi_batch())
    close(a[:, :2], [[0.8 * X, 1.2 * X], [-0.8 * X, -1.2 * X]])
    # clip 0.1 (no smoothing): PMI [0, log 2] -> [0, 0.1] -> u = [1, e^0.1], mean 1.052585 -> w = [0.950043, 1.049957]
    a, _ = PMITokens(PMITokens.Config(smoothing=0.0, clip=0.1, ramp_steps=0))(pmi_batch())
    close(a[0, :2], [0.950043 * X, 1.049957 * X])
    # ramp_steps 2: lam = 0.5 on the first batch: u = sqrt([14/15, 1.4]) = [0.966092, 1.183216] -> w = [0.898980, 1.101020];
    # full strength from the second batch on (w = [0.8, 1.2]); the count is the saved state.
    pmi = PMITokens(PMITokens.Config(ramp_steps=2))
    a, m = pmi(pmi_batch())
    assert m["pmi/strength"] == 0.5
    close(a[0, :2], [0.898980 * X, 1.101020 * X])
    pmi(pmi_batch())
    assert pmi.state_dict() == {"count": 2}
    fresh = PMITokens(PMITokens.Config(ramp_steps=2))
    fresh.load_state_dict(pmi.state_dict())
    close(fresh(pmi_batch())[0][0, :2], [0.8 * X, 1.2 * X])


def test_pmi_tokens_counted_over_the_batch_do_not_collapse_when_no_token_repeats_in_a_group():
    # Two groups, rewards [1, 0] each -> A = [X, -X, X, -X]. No id repeats inside a group: group 0 [5, 6] / [7, 8],
    # group 1 [5, 7] / [6, 9]. In-group counts: every token has PMI log 2 -> uniform weights -> GRPO.
    b = batch([1, 0, 1, 0], 2, ids=[[5, 6], [7, 8], [5, 7], [6, 9]])
    grouped, _ = PMITokens(PMITokens.Config(smoothing=0.0, ramp_steps=0, scope="group"))(b)
    close(grouped, [[X, X], [-X, -X], [X, X], [-X, -X]])
    # Batch counts (n = 8): 5 x2, 6 x2, 7 x2, 8, 9. Successes [5, 6, 5, 7] (n_P = 4): PMI(5) = log (2/4)/(2/8) = log 2,
    # PMI(6) = PMI(7) = log (1/4)/(2/8) = 0 -> rows [5, 6], [5, 7]: u = [2, 1] -> w = [4/3, 2/3].
    # Failures [7, 8, 6, 9] (n_N = 4): PMI(7) = PMI(6) = 0, PMI(8) = PMI(9) = log (1/4)/(1/8) = log 2 -> w = [2/3, 4/3].
    pooled, _ = PMITokens(PMITokens.Config(smoothing=0.0, ramp_steps=0))(b)  # scope: batch, the default
    close(pooled, [[4 * X / 3, 2 * X / 3], [-2 * X / 3, -4 * X / 3], [4 * X / 3, 2 * X / 3], [-2 * X / 3, -4 * X / 3]])


def test_pmi_tokens_strength_zero_equal_rewards_and_one_sample_groups():
    b = pmi_batch()
    torch.testing.assert_close(PMITokens(PMITokens.Config(strength=0.0))(b)[0], grpo(b).unsqueeze(1).expand(2, 3))
    close(PMITokens(PMITokens.Config())(batch([0.4, 0.4], 2, ids=[[5, 6], [5, 7]]))[0], [[0.0, 0.0], [0.0, 0.0]])
    close(PMITokens(PMITokens.Config())(batch([1.0, 0.0], 1, ids=[[5, 6], [5, 7]]))[0], [[0.0, 0.0], [0.0, 0.0]])


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
