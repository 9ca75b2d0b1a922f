"""AMARIS in the loop (seed 004 #17, rlpost/rewards/rubric_revision.py): semantic retrieval by hand with fixed
embeddings and with the real MiniLM, per-instance decisions, the revision's edit budget, and the rubric reward's
``revise`` switch called step by step with a real endpoint judge and writer (tests/support/judges.py): a
synchronous revision lands at the next boundary, an asynchronous one does not block the steps while its writer is
still writing, checkpoints carry the memory and a revision in flight, per-row rubrics are revised per row."""

from __future__ import annotations

import json
import time

import pytest
import torch
import yaml
from transformers import TrainerState

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.rewards.base import build_term, parse_term
from rlpost.rewards.rubric import Criterion
from rlpost.rewards.rubric_memory import (
    MEMORY_FILE,
    RevisionSettings,
    decide,
    instance_id,
    related_edits,
    retrieve,
)
from rlpost.rewards.rubric_revision import compute_revision

from support.judges import GATE, requests_for

HARD = Criterion("hard", "The response explains every step.")
EASY = Criterion("easy", "The response gives one number.")
NEW = "The response states the final answer and checks it by a second method."  # the endpoint writer's reply


def summary(step, instance=None, **criteria):
    record = {"kind": "step_summary", "step": step, "criteria": criteria, "reward": 0.5}
    return {**record, "instance": instance} if instance else record


def rollout(step, question, response, verdict, instance=None):
    record = {"kind": "rollout_analysis", "step": step, "question": question, "response": response,
              "reward": float(verdict == "success"), "verdict": verdict}  # fmt: skip
    return {**record, "instance": instance} if instance else record


# fixed embeddings: the criterion points along x; each rollout text (question + " " + response) somewhere else
VECTORS = {
    HARD.text: [1.0, 0.0],
    "a every step shown": [0.0, 1.0],  # cos 0: shares two words with the criterion, means nothing like it
    "b twelve": [3.0, 4.0],  # cos 3/5 = 0.6
    "c nothing": [1.0, 1.0],  # cos 1/sqrt(2) = 0.707
    "The response is short.": [0.0, 1.0],  # cos 0
    "The response lists steps.": [2.0, 1.0],  # cos 2/sqrt(5) = 0.894
}


def fixed_embed(texts: list[str]) -> torch.Tensor:
    """Texts [M] -> their fixed vectors [M, 2] (unnormalised: relevance takes the cosine)."""
    return torch.tensor([VECTORS[t] for t in texts])


MEMORY = [
    summary(1, hard=0.1),
    summary(2, hard=0.2),
    summary(3, hard=0.3),
    rollout(1, "z", "c nothing", "failure"),  # relevant, but before the window (steps 2-3)
    rollout(2, "a", "every step shown", "failure"),
    rollout(3, "b", "twelve", "failure"),
    rollout(3, "c", "nothing", "failure"),
    rollout(3, "d", "every step", "success"),  # the wrong verdict for a clarification
]


def test_semantic_retrieval_ranks_by_cosine_where_lexical_ranks_by_shared_words():
    semantic = RevisionSettings(window=2, evidence=2, retrieval="semantic")
    lexical = RevisionSettings(window=2, evidence=2, retrieval="lexical")
    # semantic: cos(c) = 0.707 > cos(b) = 0.6 > cos(a) = 0
    assert [r["question"] for r in retrieve(MEMORY, HARD, "failure", semantic, fixed_embed)] == ["c", "b"]
    # lexical: a shares {every, step} (2); b and c share nothing (0, both step 3: the first kept)
    assert [r["question"] for r in retrieve(MEMORY, HARD, "failure", lexical)] == ["a", "b"]
    with pytest.raises(ValueError, match="needs an embed function"):
        retrieve(MEMORY, HARD, "failure", semantic)
    # past edits of other criteria, ranked by their old text: cos 0.894 ("lists steps") over 0 ("is short")
    edits = [
        {"kind": "edit", "step": 1, "criterion": "short", "action": "raise", "old": "The response is short.",
         "new": "x", "before": 0.95},
        {"kind": "edit", "step": 2, "criterion": "steps", "action": "clarify", "old": "The response lists steps.",
         "new": "y", "before": 0.1},
        {"kind": "edit", "step": 2, "criterion": "hard", "action": "clarify", "old": HARD.text, "new": "z",
         "before": 0.1},  # its own edit: shown as its history, not as a related one
    ]  # fmt: skip
    related = related_edits(MEMORY + edits, HARD, RevisionSettings(related=1), fixed_embed)
    assert [e["criterion"] for e in related] == ["steps"]


def test_semantic_retrieval_with_minilm_finds_the_reasoning_without_a_shared_word():
    # neither rollout shares a content word with the criterion, so lexical retrieval falls back to recency
    criterion = Criterion("shows", "The response explains its reasoning step by step.")
    memory = [
        summary(1, shows=0.1),
        rollout(1, "What is (3 + 4) * 2?", "First I added three and four, then doubled that total to get fourteen.",
                "failure"),
        rollout(2, "Capital of France?", "Paris is lovely in spring.", "failure"),
    ]  # fmt: skip
    lexical = RevisionSettings(window=2, evidence=1, retrieval="lexical")
    assert retrieve(memory, criterion, "failure", lexical)[0]["step"] == 2  # the newer one
    from rlpost.rewards.embeddings import embed

    semantic = RevisionSettings(window=2, evidence=1, retrieval="semantic")
    assert retrieve(memory, criterion, "failure", semantic, embed)[0]["step"] == 1  # the worked arithmetic


def test_decisions_and_a_revision_per_instance_within_the_edit_budget():
    memory = [
        summary(1, "i1", easy=1.0, hard=0.25),
        summary(2, "i1", easy=1.0, hard=0.25),
        summary(1, "i2", easy=0.5),
        summary(2, "i2", easy=0.5),
    ]
    s = RevisionSettings(window=2, cooldown=2, retrieval="lexical")
    # i1: easy 1.0 >= 0.9 raise, hard 0.25 <= 0.3 clarify; i2: easy 0.5 keep; the global rubric: never summarised
    assert [decide(memory, c, s, "i1").action for c in (EASY, HARD)] == ["raise", "clarify"]
    assert decide(memory, EASY, s, "i2").action == "keep" and decide(memory, EASY, s).action == "keep"
    asked: list[str] = []

    def writer(prompts: list[str]) -> list[str | None]:
        asked.extend(prompts)
        return ["- " + NEW for _ in prompts]

    rubrics = {"i1": (EASY, HARD), "i2": (EASY,)}
    # max_edits 1: the most extreme change only, raise easy by 1.0 - 0.9 = 0.1 over clarify hard by 0.3 - 0.25 = 0.05
    revision = compute_revision(memory, rubrics, s, 1, writer, None, step=2)
    assert (
        len(asked) == 1
        and "has become too easy" in asked[0]
        and "Criterion: The response gives one number." in asked[0]
    )
    assert revision.rubrics == {"i1": (Criterion("easy", NEW), HARD)}  # i2 and hard untouched; names, weights kept
    assert [(d.instance, d.criterion, d.action) for d in revision.decisions] == [("i1", "easy", "raise")]


# ---- the rubric reward's revise switch, through a real endpoint judge and writer ------------------------------


def make_reward(server, tmp_path, rubric=None, column=None, **revise):
    if rubric is None and column is None:
        rubric = {"criteria": [{"name": "zebra", "text": "The response names a zebra", "weight": 1.0},
                               {"name": "four", "text": "The response contains 4", "weight": 1.0}]}  # fmt: skip
        (tmp_path / "r.yaml").write_text(yaml.safe_dump(rubric))
        rubric = str(tmp_path / "r.yaml")
    writer = {"backend": "openai", "base_url": f"{server}/{revise.pop('writer', 'revise')}/v1"}
    revise = {"enabled": True, "every": 1, "window": 1, "cooldown": 1, "retrieval": "lexical", "writer": writer,
              **revise}  # fmt: skip
    judge = {"backend": "openai", "base_url": f"{server}/keyword/v1", "cache": False, "retries": 0}
    params = {"rubric": rubric, "rubric_column": column, "reference_column": None, "judge": judge, "revise": revise}
    reward = build_term(parse_term({"name": "rubric", "params": params}, "reward.terms[0]"), "reward.terms[0]")
    reward.learning = True
    return reward


def score(reward, step, completions, logged=None, **columns):
    """One training batch of ``step`` (TRL's trainer_state: global_step = step - 1) -> the judge prompts it sent."""
    before = len(requests_for("keyword"))
    log = (lambda k, v: logged.setdefault(k, []).append(v)) if logged is not None else None
    reward(["q"] * len(completions), completions, trainer_state=TrainerState(global_step=step - 1), log_metric=log,
           **columns)  # fmt: skip
    return [e["prompt"] for e in requests_for("keyword")[before:]]


def criteria_seen(prompts):
    return sorted({p.split("Criterion: ", 1)[1].split("\n")[0] for p in prompts})


def test_a_synchronous_revision_lands_whole_at_the_next_boundary_and_is_written_to_the_run(server, tmp_path):  # noqa: F811
    reward = make_reward(server, tmp_path, asynchronous=False)
    reward.run_dir = tmp_path  # what rlpost/train.py sets on the main process
    logged: dict[str, list[float]] = {}
    old = ["The response contains 4", "The response names a zebra"]
    # step 1: zebra met by none (0.0 <= 0.3: failing), four by one of two (0.5: kept); no closed step, no request
    assert criteria_seen(score(reward, 1, ["4", "x"], logged)) == old
    # step 2's boundary closes step 1, revises (window 1: the means above) and swaps in before judging
    assert criteria_seen(score(reward, 2, ["4", "x"], logged)) == ["The response contains 4", NEW]
    assert logged["amaris/revisions"] == [0.0, 1.0] and logged["amaris/edits"] == [0.0, 1.0]
    assert logged["amaris/pending"] == [0.0, 0.0] and logged["amaris/blocking_saved_s"] == [0.0, 0.0]
    memory = [json.loads(line) for line in (tmp_path / MEMORY_FILE).read_text().splitlines()]
    assert [r["kind"] for r in memory] == ["step_summary", "rollout_analysis", "rollout_analysis", "edit", "revision"]
    assert memory[0]["criteria"] == {"zebra": 0.0, "four": 0.5}
    assert [r["verdict"] for r in memory[1:3]] == ["success", "failure"]  # rewards 0.5, 0.0; median 0.25
    edit = memory[3]
    assert (edit["step"], edit["requested"], edit["action"], edit["old"], edit["new"], edit["before"]) == (
        1, 1, "clarify", "The response names a zebra", NEW, 0.0)  # fmt: skip
    written = yaml.safe_load((tmp_path / "rubrics" / "rubric_v1.yaml").read_text())["criteria"]
    assert written == [{"name": "zebra", "text": NEW, "weight": 1.0}, {"name": "four", "text": "The response contains 4",
                                                                         "weight": 1.0}]  # fmt: skip
    # held-out scoring (learning False) uses the rubric in force and records nothing
    reward.learning = False
    assert NEW in criteria_seen(score(reward, 3, ["x"]))
    assert reward.reviser.open_step == 2


def test_an_asynchronous_revision_does_not_block_the_steps_while_the_writer_writes(server, tmp_path):  # noqa: F811
    # the writer answers only once GATE is set; every step: the first request at step 2 (step 1 closed)
    reward = make_reward(server, tmp_path, writer="gated")
    logged: dict[str, list[float]] = {}
    score(reward, 1, ["4", "x"], logged)
    started = time.perf_counter()
    seen2 = criteria_seen(score(reward, 2, ["4", "x"], logged))  # the request goes out; the writer is held
    seen3 = criteria_seen(score(reward, 3, ["4", "x"], logged))
    assert time.perf_counter() - started < 30  # a blocking revision would wait for the gate (60 s)
    assert seen2 == seen3 == ["The response contains 4", "The response names a zebra"]  # still the old rubric
    assert logged["amaris/pending"] == [0.0, 1.0, 1.0] and logged["amaris/revisions"] == [0.0, 0.0, 0.0]
    assert len(requests_for("gated")) == 1  # one revision in flight at a time
    # a checkpoint while it runs saves it as a request; a resumed reward computes it again from the same memory
    state = reward.state_dict()
    assert json.loads(state["pending"]) == {"step": 1, "records": 3}  # step 1's summary and 2 rollouts
    GATE.set()
    reward.reviser.wait()
    assert criteria_seen(score(reward, 4, ["4", "x"], logged)) == ["The response contains 4", NEW]
    assert logged["amaris/revisions"][-1] == 1.0 and logged["amaris/edits"][-1] == 1.0
    assert logged["amaris/pending"][-1] == 1.0  # after the swap the next request went out (every step)
    assert logged["amaris/blocking_saved_s"][-1] > 0  # it ran while steps 2 and 3 were scored
    edit = next(r for r in reward.reviser.memory if r["kind"] == "edit")
    assert (edit["step"], edit["requested"]) == (3, 1)  # the last step judged by the old text; its evidence
    resumed = make_reward(server, tmp_path)
    resumed.load_state_dict(state)  # the checkpoint taken at step 3, with the revision still running
    resumed.reviser.wait()
    assert criteria_seen(score(resumed, 4, ["4", "x"])) == ["The response contains 4", NEW]
    # after it landed: a checkpoint restores the revised rubric and the memory without any call
    again = make_reward(server, tmp_path)
    again.load_state_dict(reward.state_dict())
    assert [c.text for c in again.rubric_for(None)] == [NEW, "The response contains 4"]
    assert again.reviser.memory == reward.reviser.memory and again.reviser.version == 1


def test_per_row_rubrics_are_revised_per_instance(server, tmp_path):  # noqa: F811
    zebra = json.dumps([{"name": "zebra", "text": "The response names a zebra"}])
    four = json.dumps([{"name": "four", "text": "The response contains 4"}])
    reward = make_reward(server, tmp_path, column="rubric", asynchronous=False)
    reward.run_dir = tmp_path
    rows = {"rubric": [zebra, zebra, four, four]}
    # step 1: the zebra rows meet nothing (0.0: failing); the four rows half (0.5: kept)
    completions = ["4 a", "x a", "4 b", "x b"]  # a: the zebra rows, b: the four rows
    score(reward, 1, completions, **rows)
    judged = {
        (p.split("Response: ", 1)[1].split("\n")[0], p.split("Criterion: ", 1)[1].split("\n")[0])
        for p in score(reward, 2, completions, **rows)
    }  # (response, criterion) per judge call; the endpoint may receive them in any order
    assert judged == {
        ("4 a", NEW),
        ("x a", NEW),
        ("4 b", "The response contains 4"),
        ("x b", "The response contains 4"),
    }
    ids = instance_id(zebra), instance_id(four)
    summaries = [r for r in reward.reviser.memory if r["kind"] == "step_summary"]
    assert [(r["instance"], r["criteria"]) for r in summaries] == [(ids[0], {"zebra": 0.0}), (ids[1], {"four": 0.5})]
    edits = [r for r in reward.reviser.memory if r["kind"] == "edit"]
    assert [(e["instance"], e["criterion"], e["action"]) for e in edits] == [(ids[0], "zebra", "clarify")]
    assert (tmp_path / "rubrics" / f"{ids[0]}_v1.yaml").is_file()


def test_revise_settings_are_checked_before_any_model_loads(server, tmp_path):  # noqa: F811
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.revise: .*failing=0.95 must be below"):
        make_reward(server, tmp_path, failing=0.95)
    with pytest.raises(ConfigError, match=r"reward.terms\[0\].params.revise: .*every"):
        make_reward(server, tmp_path, every=0)
    judge = f"{{backend: openai, base_url: '{server}/keyword/v1'}}"
    writer = f"{{backend: openai, base_url: '{server}/revise/v1'}}"
    term = (f"reward.terms=[{{name: rubric, params: {{judge: {judge}, revise: {{enabled: true, "
            f"retrieval: lexical, writer: {writer}}}}}}}]")  # fmt: skip
    overrides = ["model=tiny-random", term, "train.completions_per_step=8", "train.num_generations=2"]
    build_run(compose(overrides))  # one process: accepted
    with pytest.raises(ConfigError, match="keeps the evaluation memory in one process"):
        build_run(compose([*overrides, "hardware.num_processes=2"]))
