"""The judge layer: verdict parsing, the OpenAI-compatible HTTP judge against a real local server
(http.server in a thread) through timeouts, malformed replies, a dead endpoint, retries and the
cache, the local model judge, and that an endpoint key never reaches a run directory."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import rlpost.components  # noqa: F401  (registers judges and rewards)
from rlpost.core.errors import ConfigError
from rlpost.judges.base import JudgeError, build_judge, parse_scale, parse_yes_no, yes_probability

from support.judges import requests_for

KEY = "sk-test-7f3a9c1e5b2d4e6f8a0b"  # a fake key that must never be written anywhere


def http_judge(server: str, behaviour: str, tmp_path: Path, **params):
    node = {
        "backend": "openai",
        "base_url": f"{server}/{behaviour}/v1",
        "cache_path": str(tmp_path / "cache"),
        **params,
    }
    return build_judge(node, "judge")


# ---- parsing ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, score",
    [
        ("Yes", 1.0),
        (" **yes**, because", 1.0),
        ("No.", 0.0),
        ("'no'", 0.0),
        ("Maybe", None),
        ("", None),
        ("Yesterday", None),
    ],
)
def test_parse_yes_no(text, score):
    assert parse_yes_no(text) == score


@pytest.mark.parametrize(
    "text, score",
    [("7", 6 / 9), ("Score: 10/10", 1.0), ("1", 0.0), ("0", None), ("11", None), ("2.5", None), ("none", None)],
)
def test_parse_scale(text, score):
    # (s - 1) / 9: 7 -> 6/9, 10 -> 1, 1 -> 0; 0 and 11 are out of range; "2.5" has no integer verdict
    assert parse_scale(text) == (None if score is None else pytest.approx(score))


def test_yes_probability():
    # sigmoid(2 - 0) = 1 / (1 + e^-2) = 0.880797...; equal logits give 0.5
    assert yes_probability(2.0, 0.0) == pytest.approx(0.8807970779778823)
    assert yes_probability(-1.5, -1.5) == 0.5


# ---- the HTTP judge ---------------------------------------------------------------------------


def test_http_judge_scores_and_sends_the_key(server, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", KEY)
    judge = http_judge(server, "ok", tmp_path, api_key_env="JUDGE_KEY", concurrency=2)
    assert judge.score(["a good answer?", "a bad answer?", "good?"]) == [1.0, 0.0, 1.0]
    assert {e["auth"] for e in requests_for("ok")} == {f"Bearer {KEY}"}
    assert judge.stats == {"calls": 3, "failures": 0, "cache_hits": 0}
    assert KEY not in repr(judge)


def test_http_judge_cache_hit_sends_no_request(server, tmp_path):
    judge = http_judge(server, "ok", tmp_path)
    assert judge.score(["good one", "bad one"]) == [1.0, 0.0]
    again = http_judge(server, "ok", tmp_path)  # a new judge (new process) reads the same cache
    assert again.score(["bad one", "good one", "good two"]) == [0.0, 1.0, 1.0]
    assert len(requests_for("ok")) == 3  # 2 + only "good two"
    assert again.stats == {"calls": 1, "failures": 0, "cache_hits": 2}


def test_http_judge_retries_with_backoff(server, tmp_path):
    judge = http_judge(server, "flaky", tmp_path, retries=3, backoff_s=0.05)
    assert judge.score(["good after two 503s"]) == [1.0]
    sent = requests_for("flaky")
    assert len(sent) == 3  # 503, 503, answer
    gaps = [b["t"] - a["t"] for a, b in zip(sent, sent[1:])]
    assert gaps[0] >= 0.05 and gaps[1] >= 0.10  # backoff_s * 2**k before retry k+1
    assert judge.stats["failures"] == 0


def test_http_judge_timeout_skips_the_sample(server, tmp_path):
    judge = http_judge(server, "slow", tmp_path, timeout_s=0.2, retries=1, backoff_s=0.0)
    assert judge.score(["good but slow"]) == [None]  # on_failure=skip
    assert len(requests_for("slow")) == 2  # first attempt + 1 retry, both timed out
    assert judge.stats == {"calls": 1, "failures": 1, "cache_hits": 0}
    assert not list((tmp_path / "cache").rglob("*.json"))  # failures are not cached


def test_http_judge_malformed_verdict_is_not_retried(server, tmp_path):
    judge = http_judge(server, "malformed", tmp_path, retries=3, on_failure="zero")
    assert judge.score(["anything"]) == [0.0]  # on_failure=zero
    assert len(requests_for("malformed")) == 1
    assert judge.stats["failures"] == 1


def test_http_judge_non_json_body_is_retried_then_fails(server, tmp_path):
    judge = http_judge(server, "garbage", tmp_path, retries=2, backoff_s=0.0)
    assert judge.score(["good"]) == [None]
    assert len(requests_for("garbage")) == 3


def test_http_judge_client_error_fails_at_once(server, tmp_path):
    judge = http_judge(server, "forbidden", tmp_path, retries=3, on_failure="abort")
    with pytest.raises(JudgeError, match="HTTP 401.*on_failure=abort"):
        judge.score(["good"])
    assert len(requests_for("forbidden")) == 1


def test_http_judge_endpoint_down(tmp_path):
    with socket.socket() as sock:  # a port nobody listens on: connection refused
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    judge = build_judge(
        {
            "backend": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "retries": 2,
            "backoff_s": 0.0,
            "cache": False,
        },
        "judge",
    )
    assert judge.score(["good", "bad"]) == [None, None]
    assert judge.stats == {"calls": 2, "failures": 2, "cache_hits": 0}
    abort = build_judge(
        {
            "backend": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "retries": 0,
            "on_failure": "abort",
            "cache": False,
        },
        "j",
    )
    with pytest.raises(JudgeError, match="URLError.*refused"):
        abort.score(["x"])


def test_http_judge_scale_and_logprobs(server, tmp_path):
    assert http_judge(server, "scale", tmp_path, mode="scale").score(["rate it"]) == [pytest.approx(6 / 9)]
    # top log-probs Yes -0.2, "no" -1.8: sigmoid(-0.2 - (-1.8)) = sigmoid(1.6) = 0.832018...
    judge = http_judge(server, "logprobs", tmp_path, logprobs=True)
    assert judge.score(["bad, but logprobs say yes"]) == [pytest.approx(0.8320183851339245)]


def test_http_judge_config_errors(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_KEY_VAR is not set"):
        build_judge({"backend": "openai", "api_key_env": "NO_SUCH_KEY_VAR"}, "judge")
    with pytest.raises(ConfigError, match=r"judge.backend: Unknown judge 'opnai'. Did you mean 'openai'"):
        build_judge({"backend": "opnai"}, "judge")
    with pytest.raises(ConfigError, match="on_failure='retry'. Valid choices: skip, zero, abort"):
        build_judge({"backend": "openai", "on_failure": "retry"}, "judge")


def test_pickled_http_judge_drops_the_key(monkeypatch):
    import pickle

    monkeypatch.setenv("JUDGE_KEY", KEY)
    judge = build_judge({"backend": "openai", "api_key_env": "JUDGE_KEY", "cache": False}, "judge")
    data = pickle.dumps(judge)
    assert KEY.encode() not in data
    assert pickle.loads(data)._key == KEY  # re-read from the environment on the other side


# ---- the local judge --------------------------------------------------------------------------


def test_local_judge_batched_equals_one_by_one():
    """Scores are sigmoid(logit Yes - logit No) at the first answer position; left-padded batches
    give the same scores as single prompts."""
    judge = build_judge({"backend": "local", "model": {"source": "tiny_random"}, "batch_size": 3}, "judge")
    prompts = [
        "Is 2 + 2 = 4?",
        "Is the sky green on a clear day at noon?",
        "Yes?",
        "Is this response polite and correct?",
    ]
    batched = judge.score(prompts)
    judge.load()
    single = []
    for p in prompts:
        inputs = judge._encode([p])
        with torch.no_grad():
            logits = judge._model(**inputs).logits[0, -1]
        single.append(torch.sigmoid(logits[judge.yes_id] - logits[judge.no_id]).item())
    assert batched == pytest.approx(single, abs=1e-5)
    assert all(0.0 < s < 1.0 for s in batched)
    assert (judge.yes_id, judge.no_id) == (10539, 5230)  # SmolLM2's "Yes" and "No"


def test_local_scale_judge_samples_with_a_temperature_and_is_greedy_without():
    """temperature > 0 samples the 1-10 reply (a noisy rater for ODRPO): two calls on the same prompts give other
    replies; temperature 0 is greedy and repeats itself. The tiny random model's replies are not numbers, so
    each comes back as the malformed-verdict error that quotes it."""
    prompts = ["Rate this response from 1 to 10: 'The answer is 42.'", "Rate: 'I do not know.'"] * 3

    def replies(temperature: float) -> list[list[str]]:
        node = {"backend": "local", "model": {"source": "tiny_random"}, "mode": "scale", "max_new_tokens": 6}
        judge = build_judge({**node, "temperature": temperature}, "judge")
        return [[str(r) for r in judge._judge(prompts)] for _ in range(2)]

    sampled, greedy = replies(1.0), replies(0.0)
    assert sampled[0] != sampled[1] and greedy[0] == greedy[1]
    assert greedy[0][0] == greedy[0][2]  # greedy: the same prompt, the same reply
    with pytest.raises(ConfigError, match="temperature > 0 samples a scale reply"):
        build_judge({"backend": "local", "temperature": 1.0}, "judge")
    with pytest.raises(ConfigError, match="cannot keep a disk cache"):
        build_judge({"backend": "local", "mode": "scale", "temperature": 1.0, "cache": True}, "judge")


# ---- the key never reaches a run directory ----------------------------------------------------


def test_endpoint_key_never_in_run_directory(server, tmp_path):
    """A real `rlpost train` (tiny model, 2 steps) with reward=rubric judged over HTTP: the key is
    sent on every request and found in no file of the run directory (nor in the judge cache)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "JUDGE_KEY": KEY, "WANDB_MODE": "offline", "RLPOST_CACHE": os.environ.get("RLPOST_CACHE", "")}
    env = {k: v for k, v in env.items() if v}
    judge = "reward.terms.0.params.judge"
    args = [
        "train",
        "model=tiny-random",
        "reward=rubric",
        f"+{judge}.base_url={server}/ok/v1",
        f"{judge}.backend=openai",
        f"+{judge}.api_key_env=JUDGE_KEY",
        f"+{judge}.cache_path={tmp_path / 'judge-cache'}",
        f"~{judge}.model",
        f"~{judge}.batch_size",
        f"~{judge}.device",
        "train.steps=2",
        "train.max_completion_length=8",
        "data.train_size=16",
        "data.eval_size=4",
        "eval.size=4",
        "logging.progress=false",
        "logging.wandb=offline",
        f"hydra.run.dir={run_dir}",
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "rlpost.cli", *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert requests_for("ok") and {e["auth"] for e in requests_for("ok")} == {f"Bearer {KEY}"}
    files = [p for p in [*run_dir.rglob("*"), *(tmp_path / "judge-cache").rglob("*")] if p.is_file()]
    assert len(files) > 5
    leaked = [str(p) for p in files if KEY.encode() in p.read_bytes()]
    assert not leaked
    assert KEY not in proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert len(steps) == 2 and all(math.isfinite(r["loss"]) for r in steps)
