"""rlpost revise-rubrics (AMARIS, seed 004 #17): the evaluation memory from a run's logs, the decision rule
(raise / clarify / revert / keep, cooldown) by hand, retrieval, edit effects, the writer's reply, and the
CLI twice on one run through a real OpenAI-compatible endpoint (the second pass respects the cooldown)."""

from __future__ import annotations

import json

import pytest
import yaml

from rlpost import cli
from rlpost.rewards.rubric import Criterion, parse_rubric
from rlpost.rewards.rubric_memory import (
    MEMORY_FILE,
    RevisionSettings,
    decide,
    edit_effect,
    ingest,
    parse_criterion,
    retrieve,
    window_mean,
    writer_prompt,
)

from support.judges import requests_for

S = RevisionSettings(window=2, saturated=0.9, failing=0.3, cooldown=2, evidence=1, retrieval="lexical")
EASY = Criterion("easy", "The response gives one number.")
HARD = Criterion("hard", "The response explains every step.")
MID = Criterion("mid", "The response is polite.")


def summary(step, **criteria):
    return {"kind": "step_summary", "step": step, "criteria": criteria, "reward": 0.5}


def rollout(step, question, response, verdict):
    reward = 1.0 if verdict == "success" else 0.0
    return {"kind": "rollout_analysis", "step": step, "question": question, "response": response, "reward": reward,
            "verdict": verdict}  # fmt: skip


MEMORY = [
    summary(1, easy=0.5, hard=0.1, mid=0.5),
    summary(2, easy=0.9, hard=0.2, mid=0.6),
    summary(3, easy=1.0, hard=0.3, mid=0.4),
]


def test_window_means_and_the_decision_rule_by_hand():
    # window 2: easy (0.9 + 1.0) / 2 = 0.95 >= 0.9: raise; hard (0.2 + 0.3) / 2 = 0.25 <= 0.3: clarify; mid 0.5: keep
    assert window_mean(MEMORY, "easy", 2) == pytest.approx(0.95)
    assert window_mean(MEMORY, "easy", 2, before=2) == pytest.approx(0.7)  # steps 1-2
    assert [decide(MEMORY, c, S).action for c in (EASY, HARD, MID)] == ["raise", "clarify", "keep"]
    assert decide(MEMORY, Criterion("gone", "x"), S).action == "keep"  # never logged
    # a raise at step 3 is within the cooldown (2 steps) until step 5
    edited = [*MEMORY, {"kind": "edit", "step": 3, "criterion": "easy", "action": "raise", "old": "o", "new": "n",
                        "before": 0.95}]  # fmt: skip
    assert decide([*edited, summary(4, easy=0.1)], EASY, S).reason.startswith("edited at step 3")
    # after the cooldown the raised criterion fails (window: 0.1, 0.2 -> 0.15): revert to the old text, once
    later = [*edited, summary(4, easy=0.1), summary(5, easy=0.2)]
    revert = decide(later, EASY, S)
    assert (revert.action, revert.new_text) == ("revert", "o")
    # the mean after the edit (steps 4, 5 within the window: 0.15) minus before (0.95)
    assert edit_effect(later, edited[-1], window=2) == pytest.approx(-0.8)
    reverted = [*later, {"kind": "edit", "step": 5, "criterion": "easy", "action": "revert", "old": "n", "new": "o",
                         "before": 0.15}, summary(6, easy=1.0), summary(7, easy=1.0), summary(8, easy=1.0)]  # fmt: skip
    assert decide(reverted, EASY, S).action == "keep"  # saturated again, but a revert is not raised again


def test_retrieval_prefers_relevant_recent_rollouts_of_the_right_verdict():
    memory = [
        *MEMORY,
        rollout(1, "2+2?", "I explain every step: 2+2=4", "failure"),  # relevant but too old (window: steps 2-3)
        rollout(2, "3+3?", "6", "failure"),
        rollout(3, "4+4?", "Each step explained: 8", "failure"),
        rollout(3, "5+5?", "every step explained, 10", "success"),
    ]
    assert [r["question"] for r in retrieve(memory, HARD, "failure", S)] == ["4+4?"]
    prompt = writer_prompt(memory, HARD, decide(memory, HARD, S), S)
    assert "Criterion: The response explains every step." in prompt and "A: Each step explained: 8" in prompt
    assert "25% of the time" in prompt and "Rewrite the criterion" in prompt


def test_the_writers_reply_is_one_usable_sentence():
    old = "The response gives one number."
    assert parse_criterion('\n- "The response gives one number and its unit."\nmore', old, 300) == (
        "The response gives one number and its unit."
    )
    assert parse_criterion("The response gives one number.", old, 300) is None  # unchanged
    assert parse_criterion("ok", old, 300) is None and parse_criterion(None, old, 300) is None
    assert parse_criterion("x" * 400, old, 300) is None
    # Qwen2.5-Coder-0.5B's clarification of a failing criterion in a CPU run: it echoes the prompt's statistics
    echo = "The response must contain a good response that meets the criteria of over the last 5 training steps they met it 30% of the time."
    assert parse_criterion(echo, old, 300) is None


def make_run(tmp_path, steps):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True, exist_ok=True)
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(yaml.safe_dump({"criteria": [
        {"name": "easy", "text": EASY.text, "weight": 1.0},
        {"name": "hard", "text": HARD.text, "weight": 2.0},
        {"name": "mid", "text": MID.text, "weight": 1.0},
    ]}))  # fmt: skip
    (run / "config.yaml").write_text(
        yaml.safe_dump({"reward": {"terms": [{"name": "rubric", "params": {"rubric": str(rubric)}}]}})
    )
    metrics = [{"step": s, "grad_norm": 1.0, "reward": 0.5, "rubric/easy": e, "rubric/hard": h, "rubric/mid": 0.5}
               for s, e, h in steps]  # fmt: skip
    (run / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    samples = [
        {"step": s, "prompt": [{"role": "user", "content": f"{s}+1?"}], "completion": [{"role": "assistant", "content": str(r)}],
         "reward": r}
        for s, _, _ in steps for r in (0.0, 1.0)
    ]  # fmt: skip
    (run / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in samples))
    return run


def test_ingest_reads_summaries_and_rollouts_once(tmp_path):
    run = make_run(tmp_path, [(1, 0.5, 0.1), (2, 1.0, 0.2)])
    records = ingest(run, [], ["easy", "hard", "mid"])
    summaries = [r for r in records if r["kind"] == "step_summary"]
    assert [(r["step"], r["criteria"]["easy"]) for r in summaries] == [(1, 0.5), (2, 1.0)]
    rollouts = [r for r in records if r["kind"] == "rollout_analysis"]
    assert [(r["step"], r["verdict"]) for r in rollouts] == [
        (1, "failure"),
        (1, "success"),
        (2, "failure"),
        (2, "success"),
    ]
    assert rollouts[0]["question"] == "1+1?" and rollouts[0]["response"] == "0.0"
    assert ingest(run, records, ["easy", "hard", "mid"]) == []  # nothing twice


def test_cli_revises_then_respects_the_cooldown(server, tmp_path, capsys):  # noqa: F811
    run = make_run(tmp_path, [(1, 0.9, 0.1), (2, 1.0, 0.2), (3, 0.95, 0.25)])
    writer = ["writer.backend=openai", f"writer.base_url={server}/revise/v1", "window=3", "cooldown=2"]
    assert cli.main(["revise-rubrics", f"run={run}", *writer]) == 0
    revised = parse_rubric(str(run / "rubrics" / "rubric_v1.yaml"))
    new = "The response states the final answer and checks it by a second method."
    # easy (0.95) raised and hard (0.18) clarified by the writer's reply; mid (0.5) kept; names and weights kept
    assert [(c.name, c.text, c.weight) for c in revised] == [
        ("easy", new, 1.0),
        ("hard", new, 2.0),
        ("mid", MID.text, 1.0),
    ]
    assert len(requests_for("revise")) == 2
    memory = [json.loads(line) for line in (run / MEMORY_FILE).read_text().splitlines()]
    edits = [r for r in memory if r["kind"] == "edit"]
    assert [(e["criterion"], e["action"], e["step"], e["version"]) for e in edits] == [
        ("easy", "raise", 3, 1),
        ("hard", "clarify", 3, 1),
    ]
    assert edits[0]["before"] == pytest.approx(0.95)
    assert "revised rubric" in capsys.readouterr().out
    # one more logged step: the edits are within the cooldown, nothing changes, and the latest revision is read
    with (run / "metrics.jsonl").open("a") as f:
        f.write(
            json.dumps({"step": 4, "grad_norm": 1.0, "rubric/easy": 0.2, "rubric/hard": 0.9, "rubric/mid": 0.5}) + "\n"
        )
    assert cli.main(["revise-rubrics", f"run={run}", *writer]) == 0
    assert "no criterion changed" in capsys.readouterr().out and not (run / "rubrics" / "rubric_v2.yaml").exists()
    assert len(requests_for("revise")) == 2


def test_cli_refuses_bad_input(tmp_path, capsys):
    run = make_run(tmp_path, [(1, 0.5, 0.5)])
    cases = [
        ([], "run is required"),
        ([f"run={tmp_path}"], "is not an rlpost run directory"),
        ([f"run={run}", "failing=0.95"], "failing=0.95 must be below saturated=0.9"),
        ([f"run={run}", f"rubric={tmp_path / 'none.yaml'}"], "no such rubric file"),
    ]
    for args, message in cases:
        assert cli.main(["revise-rubrics", *args]) == 2, args
        assert message in capsys.readouterr().err, args
