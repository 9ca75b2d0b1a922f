"""Group-level rewards: the gather/split base (one process and two gloo processes), majority_vote
and CoRE by hand, and CoRE == majority_vote in its special case."""

from __future__ import annotations

import random

import pytest
import torch

import rlpost.components  # noqa: F401  (registers every reward)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.core import jaccard_matrix, replicator
from rlpost.rewards.group import extract_answer, group_bounds
from rlpost.scoring.terms import build_reward_terms


def make(name, **params):
    cls = REWARDS.get(name)
    return cls(build_config(cls.Config, params, "test"))


def score(reward, completions, g=None, prompts=None, **columns):
    reward.group_size = g
    prompts = prompts or ["q"] * len(completions)
    logged = {}
    out = reward(prompts, completions, log_metric=lambda k, v: logged.__setitem__(k, v), **columns)
    return out, logged


# ---- the base ---------------------------------------------------------------------------------


def test_group_bounds():
    assert group_bounds(list("aaaa"), 2) == [(0, 2), (2, 4)]
    assert group_bounds(list("aabbba"), None) == [(0, 2), (2, 5), (5, 6)]  # runs of equal prompts
    with pytest.raises(ValueError, match="not a multiple of the group size 4"):
        group_bounds(list("aaaaaa"), 4)


@pytest.mark.parametrize(
    "text, how, answer",
    [
        ("so 2+2 = 4.0", "last_number", "4"),
        ("it is 4,000", "last_number", "4000"),
        ("x = -2.5", "last_number", "-2.5"),
        ("no number", "last_number", None),
        ("\\boxed{1} then \\boxed{ \\frac{1}{2} }", "boxed", "\\frac{1}{2}"),
        ("  Paris \n is ", "text", "paris is"),
        ("   ", "text", None),
    ],
)
def test_extract_answer(text, how, answer):
    assert extract_answer(text, how) == answer


# ---- majority_vote ------------------------------------------------------------------------------


def test_majority_vote_by_hand():
    mv = make("majority_vote", column="answer")
    # group 1: answers 4, 4, 5, none -> mode 4 (2 of 4): r = [1, 1, 0, 0]
    # group 2: answers 7, 8, 8, 8 -> mode 8: r = [0, 1, 1, 1]
    texts = ["4", "2+2=4", "5", "no idea", "7", "8", "it is 8", "8.0"]
    out, logged = score(mv, texts, g=4, answer=["4"] * 4 + ["7"] * 4)
    assert out == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert logged["majority_vote/majority_share"] == pytest.approx((2 / 4 + 3 / 4) / 2)
    assert logged["majority_vote/label_accuracy"] == 0.5  # group 1's label 4 is right, group 2's 8 is not
    assert logged["majority_vote/labelled"] == 1.0


def test_majority_vote_failure_paths():
    mv = make("majority_vote")
    assert score(mv, ["a", "b", "c"], g=3)[0] == [0.0, 0.0, 0.0]  # no parsable answer: no label
    assert score(mv, ["3"], g=1)[0] == [1.0]  # a group of one agrees with itself
    assert score(mv, ["none"], g=1)[0] == [0.0]
    # ties 1, 2, 2, 1: first -> the tied answer seen first (1); all -> both; none -> no label
    tie = ["1", "2", "2", "1"]
    assert score(mv, tie, g=4)[0] == [1.0, 0.0, 0.0, 1.0]
    assert score(make("majority_vote", ties="all"), tie, g=4)[0] == [1.0] * 4
    assert score(make("majority_vote", ties="none"), tie, g=4)[0] == [0.0] * 4
    # min_share 0.75: mode count 2 of 4 < 3 -> no label
    assert score(make("majority_vote", min_share=0.75), ["1", "1", "2", "3"], g=4)[0] == [0.0] * 4
    with pytest.raises(KeyError, match="column 'gold'"):
        score(make("majority_vote", column="gold"), ["1", "1"], g=2)


def test_majority_vote_groups_without_trainer_are_runs_of_prompts():
    mv = make("majority_vote")
    out, _ = score(mv, ["1", "1", "2", "3", "3", "4"], prompts=["a", "a", "a", "b", "b", "b"])
    assert out == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]


def test_bad_params_name_the_key():
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.ties='most'. Valid choices: first, all, none"):
        build_reward_terms([{"name": "majority_vote", "params": {"ties": "most"}}])
    with pytest.raises(ConfigError, match=r"params.gate: must be in \[0, 1\]"):
        build_reward_terms([{"name": "core", "params": {"gate": 2.0}}])
    with pytest.raises(ConfigError, match="Valid choices: last_number, boxed, text"):
        build_reward_terms([{"name": "core", "params": {"answer": "final"}}])


# ---- CoRE -------------------------------------------------------------------------------------


def test_replicator_and_jaccard_by_hand():
    # a 2-clique {0, 1} and a singleton {2}: payoffs (1/3, 1/3, 0) -> x = (1/2, 1/2, 0) in one step
    w = torch.tensor([[0.0, 1, 0], [1, 0, 0], [0, 0, 0]], dtype=torch.float64)
    assert replicator(w, 50, 1e-12).tolist() == pytest.approx([0.5, 0.5, 0.0])
    assert replicator(torch.zeros(2, 2, dtype=torch.float64), 50, 1e-12).tolist() == [0.5, 0.5]  # no edges
    # "a b" -> {a, b, "a b"}; "a c" -> {a, c, "a c"}: |inter| 1 / |union| 5
    assert jaccard_matrix(["a b", "a c"])[0, 1].item() == pytest.approx(1 / 5)


def test_core_by_hand_graded_and_gated():
    # answers 4, 4, 4, 5 (no similarity): W = 1 among the three 4s; x -> (1/3, 1/3, 1/3, 0)
    # kappa = x^T W x = 6 * (1/9) = 2/3 = 1 - 1/3; payoff of a 4 = 2/3 -> pi = 1
    core = make("core", similarity_weight=0.0, grading=0.5)
    out, logged = score(core, ["4", "4", "4", "5"], g=4)
    assert out == pytest.approx([1.0, 1.0, 1.0, 0.0])
    assert logged["core/cohesiveness"] == pytest.approx(2 / 3)
    assert logged["core/dominant_set_size"] == 3.0
    # gate 0.7 > kappa 2/3: the question is skipped (all 0)
    out, logged = score(make("core", similarity_weight=0.0, gate=0.7), ["4", "4", "4", "5"], g=4)
    assert out == [0.0] * 4 and logged["core/gated"] == 1.0


def test_core_confidence_grades_and_can_overturn_the_vote():
    # answers 1, 1, 2, 2 (a tie for the vote); confidences p = exp(logprob) = (0.2, 0.2, 1, 1)
    # -> c = p / max p = (0.2, 0.2, 1, 1): W_01 = 0.04, W_23 = 1. The 2s win the tie the vote
    # would break toward 1 (first seen). kappa -> x^T W x with x -> (0, 0, 1/2, 1/2) = 1/2.
    import math

    core = make("core", similarity_weight=0.0, confidence="logprob", grading=1.0)
    logps = [math.log(0.2), math.log(0.2), 0.0, 0.0]
    out, logged = score(core, ["1", "1", "2", "2"], g=4, rlpost_logprob=logps)
    assert out == pytest.approx([0.0, 0.0, 1.0, 1.0])
    assert logged["core/cohesiveness"] == pytest.approx(0.5)
    assert score(make("majority_vote"), ["1", "1", "2", "2"], g=4)[0] == [1.0, 1.0, 0.0, 0.0]
    with pytest.raises(KeyError, match="rlpost_logprob"):
        score(core, ["1", "1"], g=2)
    # held-out eval has no log-prob column but groups of one, where c = p / max p = 1 anyway; a lone
    # roll-out holds the label but has no support (kappa = 0 -> pi = 0): (1 - g) + g * 0 = 0 at g = 1
    assert score(core, ["1"], g=1)[0] == [0.0]
    assert score(make("core", confidence="logprob", grading=0.25), ["1"], g=1)[0] == [0.75]


def test_core_similarity_edges_by_hand():
    # Jaccard of word uni+bigram sets: "step one gives 3" vs "so 3": {3} / 9 words+bigrams = 1/9;
    # vs "step one gives 5": {step, one, gives, step one, one gives} / 9 = 5/9; "so 3" vs "...5": 0.
    # alpha = beta = 1: W_ij = (A_ij + S_ij) / 2 -> W_01 = (1 + 1/9) / 2 = 5/9, W_02 = (0 + 5/9) / 2 = 5/18
    core = make("core", similarity_weight=1.0)
    texts = ["step one gives 3", "so 3", "step one gives 5"]
    w = core.edges(["3", "3", "5"], texts, torch.ones(3, dtype=torch.float64))
    expected = torch.tensor([[0, 5 / 9, 5 / 18], [5 / 9, 0, 0], [5 / 18, 0, 0]], dtype=torch.float64)
    torch.testing.assert_close(w, expected)


def test_core_graded_reward_by_hand_one_step():
    # answers 4, 4, 4 with p = (1, 1, 0.5): c = p / max p, W_01 = 1, W_02 = W_12 = 0.5; one replicator step:
    # x0 = 1/3: payoff (0.5, 0.5, 1/3), fitness 4/9 -> x1 = (0.375, 0.375, 0.25)
    # payoff1 = W x1 = (0.5, 0.5, 0.375); kappa = x1 . payoff1 = 0.46875
    # pi = clip(payoff1 / kappa) = (1, 1, 0.8); grading 1 -> r = pi
    import math

    core = make("core", similarity_weight=0.0, confidence="logprob", grading=1.0, max_iter=1)
    out, logged = score(core, ["4", "4", "4"], g=3, rlpost_logprob=[0.0, 0.0, math.log(0.5)])
    assert out == pytest.approx([1.0, 1.0, 0.8])
    assert logged["core/cohesiveness"] == pytest.approx(0.46875)
    # grading 0.5: (1 - g) + g * pi -> (1, 1, 0.9)
    half = make("core", similarity_weight=0.0, confidence="logprob", grading=0.5, max_iter=1)
    assert score(half, ["4", "4", "4"], g=3, rlpost_logprob=[0.0, 0.0, math.log(0.5)])[0] == pytest.approx(
        [1.0, 1.0, 0.9]
    )


def test_core_equals_majority_vote_in_its_special_case():
    # CoRE with alpha > 0, beta = 0, no confidence, no grading, no gate == majority vote (ties: first)
    core = make("core", agreement_weight=1.0, similarity_weight=0.0, confidence="none", grading=0.0, gate=0.0)
    vote = make("majority_vote", ties="first")
    rng = random.Random(0)
    groups = [["1", "2", "2", "1"], ["x"], ["7"], ["a", "b"], ["1", "2", "3", "4"], ["5", "5", "6", "6", "6", "5"]]
    for _ in range(200):  # random groups over a few answers, some unparsable, sizes 1..8
        groups.append([rng.choice(["1", "2", "3", "four", "so 2"]) for _ in range(rng.randint(1, 8))])
    for texts in groups:
        g = len(texts)
        assert score(core, texts, g=g)[0] == score(vote, texts, g=g)[0], texts


# ---- several processes ------------------------------------------------------------------------


def _two_process_worker(rank: int, port: int, name: str, texts: list, results):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        import rlpost.components  # noqa: F401

        reward = make(name)
        reward.group_size = 4
        half = len(texts) // 2
        local = texts[rank * half : (rank + 1) * half]
        results[rank] = reward(["q"] * len(local), local)
    finally:
        dist.destroy_process_group()


def test_group_straddling_two_processes_gets_the_whole_group_value():
    import socket

    import torch.multiprocessing as mp

    # 2 processes x 6 completions, G = 4: group 2 (items 4..7) is split 2 + 2 across the processes
    texts = ["1", "1", "2", "1", "5", "6", "6", "6", "9", "9", "8", "8"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_two_process_worker, args=(port, "majority_vote", texts, results), nprocs=2, join=True)
    single, _ = score(make("majority_vote"), texts, g=4)
    assert results[0] + results[1] == single == [1, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 0]


# ---- DAR --------------------------------------------------------------------------------------


def test_dar_leave_one_out_crps_by_hand():
    from rlpost.rewards.dar import crps

    # x = (1, 3), y = 2: CRPS = (1 + 1)/2 - (|1-3| + |3-1|)/(2*4) = 1 - 0.5 = 0.5
    assert crps([1.0, 3.0], 2.0) == 0.5
    assert crps([], 2.0) == 0.0
    dar = make("dar")
    # group (1, 3, 2, none), y = 2; parsable xs = (1, 3, 2):
    # CRPS(F) = (1 + 1 + 0)/3 - (sum |xi - xj| = 2*(2 + 1 + 1) = 8) / 18 = 2/3 - 4/9 = 2/9
    # drop 1 -> (3, 2): 1/2 - 2/8 = 1/4; drop 3 -> (1, 2): 1/4; drop 2 -> (1, 3): 1/2
    # r_i = S(F) - S(F - i) = -2/9 + CRPS(F - i): (1/4 - 2/9, 1/4 - 2/9, 1/2 - 2/9, unparsable -1)
    out, logged = score(dar, ["1", "3", "it is 2", "no idea"], g=4, answer=["2"] * 4)
    assert out == pytest.approx([1 / 4 - 2 / 9, 1 / 4 - 2 / 9, 1 / 2 - 2 / 9, -1.0])
    assert logged["dar/crps"] == pytest.approx(2 / 9) and logged["dar/parsable"] == 0.75
    # the centred prediction earns most; a group of one: r = -|x - y| / scale = -|5 - 2| / 2
    assert score(make("dar", scale=2.0), ["5"], g=1, answer=["2"])[0] == [-1.5]
    assert score(dar, ["1", "2"], g=2, answer=[None, None])[0] == [None, None]  # no target: unscorable


# ---- reciprocal -------------------------------------------------------------------------------


def test_reciprocal_by_hand():
    rec = make("reciprocal", scale=2.0)
    # squared error: (4 - 3)^2 = 1 -> 1 / (1 + 1/2) = 2/3; exact -> 1; none -> 0 (unparsable)
    assert rec(["q"] * 3, ["4", "3", "none"], answer=[3, 3, 3]) == pytest.approx([2 / 3, 1.0, 0.0])
    # a vector target: the last 2 numbers (1, 5) vs (1, 2): MSE (0 + 9)/2 = 4.5; oracle error 0.5 ->
    # gap 4 -> 1 / (1 + 4/2) = 1/3; a better-than-oracle answer has gap 0 -> 1
    out = rec(["q"] * 2, ["w = 1, 5", "1 and 2"], answer=[[1, 2], [1, 2]], oracle=[0.5, 0.5])
    assert out == pytest.approx([1 / (1 + 4.5 / 2), 1.0])  # oracle_column unset: gap = MSE 4.5
    rec_o = make("reciprocal", scale=2.0, oracle_column="oracle")
    out = rec_o(["q"] * 3, ["w = 1, 5", "1 and 2", "5"], answer=[[1, 2], [1, 2], [1, 2]], oracle=[0.5] * 3)
    assert out == pytest.approx([1 / 3, 1.0, 0.0])  # "5" has one number for two targets: unparsable
    # absolute error: |10 - 4| = 6 -> 1 / (1 + 6/2) = 1/4; a target without a number: None
    rec_abs = make("reciprocal", error="abs", scale=2.0)
    assert rec_abs(["q"] * 2, ["10", "1"], answer=["4", "n/a"]) == [0.25, None]


# ---- group_diversity --------------------------------------------------------------------------


def test_dispersion_by_hand():
    from rlpost.rewards.group_diversity import dispersion

    # cos = [[1, 1, -1], [1, 1, -1], [-1, -1, 1]]: (1 - cos)/2 = [[0, 0, 1], [0, 0, 1], [1, 1, 0]]
    # r_i = row sum / (G - 1) = (1/2, 1/2, 1)
    cos = torch.tensor([[1.0, 1, -1], [1, 1, -1], [-1, -1, 1]])
    assert dispersion(cos).tolist() == pytest.approx([0.5, 0.5, 1.0])


def test_group_diversity_with_minilm():
    from rlpost.rewards.embeddings import embed

    div = make("group_diversity")
    texts = ["The cat sat on the mat.", "A cat was sitting on a mat.", "Stock markets fell sharply today."]
    out, logged = score(div, texts, g=3)
    e = embed(texts)
    assert e.shape == (3, 384) and e.norm(dim=1).tolist() == pytest.approx([1.0] * 3, abs=1e-5)
    cos = (e @ e.T).double()
    # r_0 = ((1 - cos01) + (1 - cos02)) / 2 / 2
    assert out[0] == pytest.approx(((1 - cos[0, 1]) + (1 - cos[0, 2])).item() / 4, abs=1e-6)
    assert out[2] > out[0] and out[2] > out[1]  # the off-topic answer disperses the group most
    assert cos[0, 1] > 0.5 > cos[0, 2]  # MiniLM loaded right: paraphrases are close, topics apart
    assert logged["group_diversity/dispersion"] == pytest.approx(sum(out) / 3)
    assert score(div, ["same", "same"], g=2)[0] == pytest.approx([0.0, 0.0], abs=1e-6)  # identical: no spread
    assert score(div, ["alone"], g=1)[0] == [0.0]  # a group of one has no dispersion


def test_ttrl_majority_recipe_builds_label_free():
    from rlpost.app import compose
    from rlpost.build import build_run

    run = build_run(compose(["recipe=ttrl_majority"]))
    _, vote = run.reward.funcs
    assert run.reward.names == ["math_answer", "majority_vote"] and run.reward.weights.tolist() == [0.0, 1.0]
    assert vote.cfg.column == "answer" and vote.cfg.ties == "first"
    assert run.settings.train.num_generations == 8
    # the gold column only feeds label_accuracy: a wrong gold does not change the reward
    vote.group_size = 4
    assert vote(["q"] * 4, ["3", "3", "4", "x"], answer=["4"] * 4) == [1.0, 1.0, 0.0, 0.0]


def test_core_embedding_similarity_uses_minilm_cosine():
    from rlpost.rewards.embeddings import cosine_matrix

    # alpha = beta = 1, S = clip(cos, 0, 1) of MiniLM embeddings: W_01 = (1 + S_01) / 2, W_02 = S_02 / 2
    texts = ["Adding the numbers gives 7", "The sum is 7", "Paris is in France, 7"]
    core = make("core", similarity="embedding", similarity_weight=1.0)
    w = core.edges(["7", "7", "8"], texts, torch.ones(3, dtype=torch.float64))
    cos = cosine_matrix(texts).double().clamp(0.0, 1.0)
    assert w[0, 1].item() == pytest.approx((1 + cos[0, 1].item()) / 2, abs=1e-6)
    assert w[0, 2].item() == pytest.approx(cos[0, 2].item() / 2, abs=1e-6)
    assert w[0, 0].item() == 0.0
