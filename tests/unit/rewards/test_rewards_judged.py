"""Judge-based group rewards against the real OpenAI-compatible judge backend on a local HTTP server
(tests/unit/judges/test_judges.py): pairwise_preference (PPR-GDE, order swapping) and rank_judge (RRC) by hand."""

from __future__ import annotations

import pytest

import rlpost.components  # noqa: F401
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.scoring.terms import build_reward_terms

from support.judges import requests_for
from support.paths import REPO

# the "keyword" endpoint says Yes iff the criterion's last word ("good") is in the text after "Response: ",
# i.e. iff Response A contains "good": s(A, B) = 1[good in A]
CONF = REPO / "conf" / "reward"
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

    node = yaml.safe_load((CONF / "pairwise_preference.yaml").read_text())
    (reward,), _, _ = build_reward_terms(node["terms"])
    reward.group_size = 2
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    out = reward([prompt] * 2, ["2 + 3 = 5.", "I like turtles."])
    # p(0 > 1) from both orders; the two rewards are complementary win rates
    assert out[0] is not None and 0.0 <= out[0] <= 1.0 and out[0] + out[1] == pytest.approx(1.0)
    assert reward.judge.stats["calls"] == 2


# ---- dynamic_rubric ---------------------------------------------------------------------------

WRITTEN = (
    "Checks:\n1. 3 | The response mentions paris\n- The response is polite please\n2 | The response mentions paris\n"
)
JUDGE_KEYWORD = "Task: {question}\n\nResponse: {response}\n\nCriterion: {item}\n{answer_format}"


@pytest.fixture(scope="module")
def writer_server():
    """An OpenAI-compatible endpoint that writes a fixed rubric and records the writer's prompts."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Writer(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body["messages"][0]["content"])
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": WRITTEN}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Writer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", seen
    httpd.shutdown()


def dynamic(judge_url, writer_url, **params):
    judge = {"backend": "openai", "base_url": f"{judge_url}/keyword/v1", "cache": False, "retries": 0}
    writer = {"backend": "openai", "base_url": writer_url, "timeout_s": 5}
    cls = REWARDS.get("dynamic_rubric")
    node = {"judge": judge, "writer": writer, "judge_template": JUDGE_KEYWORD, **params}
    return cls(build_config(cls.Config, node, "test"))


def test_parse_items():
    from rlpost.rewards.dynamic_rubric import parse_items

    # the header and the repeated check are dropped; "1. 3 | x" is item 1 with weight 3; no weight -> 1
    assert parse_items(WRITTEN, 4) == [(3.0, "The response mentions paris"), (1.0, "The response is polite please")]
    assert parse_items(WRITTEN, 1) == [(3.0, "The response mentions paris")]
    assert parse_items("ok\n\n", 4) == [] and parse_items(None, 4) == []
    # prose is not an item (SmolLM2-135M's typical reply); a bullet without weight is (weight 1)
    assert parse_items("The answer is 1.\nThe response is one sentence long.", 4) == []
    assert parse_items("* The response is one sentence long", 4) == [(1.0, "The response is one sentence long")]
    # the template's trailing importance: the first [w] is the weight; a leading weight wins over it
    written = "1. Does the response state 37 + 48 = 85? [3] essential\n2. 2 | Does the response show its work? [1]"
    assert parse_items(written, 4) == [
        (3.0, "Does the response state 37 + 48 = 85?"),
        (2.0, "Does the response show its work?"),
    ]


def test_dynamic_rubric_by_hand(server, writer_server):  # noqa: F811
    url, seen = writer_server
    reward = dynamic(server, url)
    # items (3, "...paris"), (1, "...please"); keyword judge: Yes iff the item's last word is in the response
    # "paris please": (3*1 + 1*1)/4 = 1; "paris": 3/4; "london": 0
    out, logged = score(reward, ["paris please", "paris", "london"], g=3)
    assert out == pytest.approx([1.0, 0.75, 0.0])
    assert logged["dynamic_rubric/items"] == 2.0 and logged["dynamic_rubric/writer_fallback"] == 0.0
    assert logged["dynamic_rubric/judge_calls"] == 6.0  # 3 candidates x 2 items
    # the writer saw the whole candidate set (response-set-conditioned)
    assert "Response 1: paris please" in seen[-1] and "Response 3: london" in seen[-1]


def dead_endpoint() -> str:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/v1"


def test_dynamic_rubric_writer_down_leaves_the_group_unscored(server, caplog):  # noqa: F811
    """No silent fallback: a rubric with no item scores nothing, is logged, and warns once."""
    reward = dynamic(server, dead_endpoint())
    with caplog.at_level("WARNING", logger="rlpost.rewards.dynamic_rubric"):
        out, logged = score(reward, ["hello there", "bye"], g=2)
        score(reward, ["hello there", "bye"], g=2)
    assert out == [None, None] and logged["dynamic_rubric/writer_failed"] == 1.0
    assert logged["dynamic_rubric/writer_fallback"] == 0.0 and logged["dynamic_rubric/items"] == 0.0
    unscored = [r.message for r in caplog.records if r.name == "rlpost.rewards.dynamic_rubric"]
    assert len(unscored) == 1 and "wrote no parseable item" in unscored[0]  # two failed groups, one warning


def test_dynamic_rubric_writer_down_uses_fallback_items_when_asked(server):  # noqa: F811
    reward = dynamic(server, dead_endpoint(), fallback_items=["The response says hello"])
    out, logged = score(reward, ["hello there", "bye"], g=2)
    assert out == [1.0, 0.0] and logged["dynamic_rubric/writer_fallback"] == 1.0
    with pytest.raises(ConfigError, match=r"params.judge_template: must contain \{item\}"):
        build_reward_terms([{"name": "dynamic_rubric", "params": {"judge_template": "{question} {response}"}}])


@pytest.mark.slow
def test_dynamic_rubric_conf_with_a_local_writer_co_evolves():
    """conf/reward/dynamic_rubric.yaml with SmolLM2 as the writer (the Qwen default needs `make qwen`): on a
    training batch it samples 2 rubrics, the answer prefix makes them parse, and the writer's adapters take a
    step when the rubrics' gaps differ."""
    import yaml

    node = yaml.safe_load((CONF / "dynamic_rubric.yaml").read_text())
    params = node["terms"][0]["params"]
    params["writer"]["model"]["source"] = "smollm2"
    params["writer"]["max_new_tokens"] = 24
    (reward,), _, _ = build_reward_terms(node["terms"])
    reward.group_size, reward.learning = 2, True
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    logged = {}
    out = reward(
        [prompt] * 2, ["2 + 3 = 5.", "It is 7."], answer=["5", "5"], log_metric=lambda k, v: logged.__setitem__(k, v)
    )
    assert all(r is None or 0.0 <= r <= 1.0 for r in out)
    assert logged["dynamic_rubric/writer_failed"] < 1.0 and logged["dynamic_rubric/items"] >= 1
    assert logged["dynamic_rubric/writer/signal_frac"] in (0.0, 1.0)
    assert reward.learner is not None and reward.learner.updates == logged["dynamic_rubric/writer/updates"]
