"""Judge-based group rewards against the real OpenAI-compatible judge backend on a local HTTP server
(tests/test_judges.py): pairwise_preference (PPR-GDE, order swapping) and rank_judge (RRC) by hand."""

from __future__ import annotations

import pytest
from test_judges import clear_log, requests_for, server  # noqa: F401  (the local endpoint and its log)

import rlpost.components  # noqa: F401
from rlpost.errors import ConfigError
from rlpost.rewards.base import REWARDS
from rlpost.rewards.rank_judge import average_ranks
from rlpost.rewards.terms import build_reward_terms
from rlpost.schema import build_config

# the "keyword" endpoint says Yes iff the criterion's last word ("good") is in the text after "Response: ",
# i.e. iff Response A contains "good": s(A, B) = 1[good in A]
KEYWORD = "Task: {question}\n\nResponse: {response_a}\n\nCriterion: the response says good\n\nOther: {response_b}\n{answer_format}"


def make(name, url, behaviour="keyword", **params):
    judge = {"backend": "openai", "base_url": f"{url}/{behaviour}/v1", "cache": False, "retries": 0}
    cls = REWARDS.get(name)
    return cls(build_config(cls.Config, {"judge": judge, "template": KEYWORD, **params}, "test"))


def score(reward, completions, g, **columns):
    reward.group_size = g
    logged = {}
    out = reward(["q"] * len(completions), completions, log_metric=lambda k, v: logged.__setitem__(k, v), **columns)
    return out, logged


def test_pairwise_preference_by_hand(server):  # noqa: F811
    reward = make("pairwise_preference", server)
    # s = (1, 0, 1); p(i > j) = (s_i + 1 - s_j) / 2: p01 = 1, p02 = 1/2, p12 = 0
    # r_0 = (1 + 1/2)/2 = 3/4; r_1 = (0 + 0)/2 = 0; r_2 = (1/2 + 1)/2 = 3/4
    out, logged = score(reward, ["good answer", "bad", "also good"], g=3)
    assert out == pytest.approx([0.75, 0.0, 0.75])
    assert len(requests_for("keyword")) == 6  # 3 pairs x 2 orders
    assert logged["pairwise_preference/judge_calls"] == 6.0
    # slot-A lean (s_ab + s_ba)/2 - 1/2 per pair: (0, 1/2, 0) -> 1/6
    assert logged["pairwise_preference/position_bias"] == pytest.approx(1 / 6)


def test_order_swapping_cancels_a_position_biased_judge(server):  # noqa: F811
    # the default endpoint says Yes whenever "good" is anywhere in the prompt: always slot A
    texts = ["good 1", "good 2", "good 3"]
    swapped, logged = score(make("pairwise_preference", server, behaviour="biased"), texts, g=3)
    assert swapped == pytest.approx([0.5, 0.5, 0.5]) and logged["pairwise_preference/position_bias"] == 0.5
    # without swapping the earlier completion (always in slot A) wins: p = 1 for every (i < j)
    one_order, _ = score(make("pairwise_preference", server, behaviour="biased", swap=False), texts, g=3)
    assert one_order == pytest.approx([1.0, 0.5, 0.0])


def test_pairwise_failure_paths(server):  # noqa: F811
    assert score(make("pairwise_preference", server), ["good"], g=1)[0] == [None]  # no opponent
    out, logged = score(make("pairwise_preference", server, behaviour="malformed"), ["a", "b"], g=2)
    assert out == [None, None] and logged["pairwise_preference/judge_failures"] == 2.0  # skip: unjudged
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.template: must contain \{response_b\}"):
        build_reward_terms([{"name": "pairwise_preference", "params": {"template": "{question} {response_a}"}}])
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.judge.*backend"):
        build_reward_terms([{"name": "rank_judge", "params": {"judge": {"backend": "gpt"}}}])


def test_average_ranks():
    assert average_ranks([2.5, 0.5, 2.5, 0.5]) == [1.5, 3.5, 1.5, 3.5]
    assert average_ranks([3.0, 1.0, 2.0]) == [1.0, 3.0, 2.0]


def test_rank_judge_self_competitive_by_hand(server):  # noqa: F811
    reward = make("rank_judge", server)
    # s = (1, 0, 1, 0): p01 = 1, p02 = 1/2, p03 = 1, p12 = 0, p13 = 1/2, p23 = 1
    # soft wins w = (2.5, 0.5, 2.5, 0.5) -> ranks (1.5, 3.5, 1.5, 3.5) -> r = (G - rank)/(G - 1) = (5/6, 1/6, ...)
    out, _ = score(reward, ["good", "bad", "good good", "meh"], g=4)
    assert out == pytest.approx([5 / 6, 1 / 6, 5 / 6, 1 / 6])
    assert score(reward, ["good"], g=1)[0] == [None]


def test_rank_judge_anchor_by_hand(server):  # noqa: F811
    reward = make("rank_judge", server, mode="anchor", anchor_column="anchors")
    anchors = [["good ref", "poor ref"]] * 2
    # p(c > a) = (s_c + 1 - s_a)/2; "good": vs good ref 1/2 (half), vs poor ref 1 (win) -> 1.5/2
    # "bad": vs good ref 0, vs poor ref 1/2 (half) -> 0.5/2
    out, _ = score(reward, ["good", "bad"], g=2, anchors=anchors)
    assert out == pytest.approx([0.75, 0.25])
    assert len(requests_for("keyword")) == 8  # 2 completions x 2 anchors x 2 orders
    assert score(reward, ["good"], g=1, anchors=["only ref good"])[0] == [0.5]  # one anchor as a string
    assert score(reward, ["good"], g=1, anchors=[[]])[0] == [None]  # no anchor: unscorable
    with pytest.raises(KeyError, match="column 'anchors'"):
        score(reward, ["good"], g=1)
    with pytest.raises(ConfigError, match=r"params.anchor_column: mode=anchor needs"):
        build_reward_terms([{"name": "rank_judge", "params": {"mode": "anchor"}}])


def test_default_conf_runs_the_local_smollm2_judge():
    # the conf file's judge (local SmolLM2-135M-Instruct, yes/no): real forward passes, swapped orders
    import yaml
    from test_rewards import CONF

    node = yaml.safe_load((CONF / "pairwise_preference.yaml").read_text())
    (reward,), _, _ = build_reward_terms(node["terms"])
    reward.group_size = 2
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    out = reward([prompt] * 2, ["2 + 3 = 5.", "I like turtles."])
    # p(0 > 1) from both orders; the two rewards are complementary win rates
    assert out[0] is not None and 0.0 <= out[0] <= 1.0 and out[0] + out[1] == pytest.approx(1.0)
    assert reward.judge.stats["calls"] == 2
