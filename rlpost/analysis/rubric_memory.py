"""AMARIS (seed 004 #17): rubric revision grounded in the run's own history (``rlpost revise-rubrics``).

A persistent **evaluation memory** (``rubric_memory.jsonl`` in the run directory, one record per line):

- ``step_summary``: a training step's batch mean of every criterion (``rubric/<name>``) and of the reward;
- ``rollout_analysis``: a logged rollout (``samples.jsonl``) with its step, question, response, reward and
  verdict (``success`` when its reward is at least its step's median, else ``failure``);
- ``edit``: a rubric update: version, step, criterion, action, old and new text, the criterion's mean
  over the window before it.

A revision reads the memory and decides, per criterion of the current rubric, from the last ``window``
steps' mean ``m`` (the longitudinal evidence, not the last batch)::

    last edit of the criterion less than ``cooldown`` steps ago     -> keep (let the edit show its effect)
    m >= saturated, and the last edit was not a revert              -> raise: a stricter criterion (curriculum)
    m <= failing and the last edit raised it                        -> revert to the text before that edit
    m <= failing                                                    -> clarify: a more concrete criterion
    otherwise                                                       -> keep

For ``raise`` and ``clarify`` it retrieves evidence: the recent rollouts (the last ``window`` steps) most
relevant to the criterion (content-word overlap with its text), successes for raise and failures for
clarify, ``evidence`` of them, plus the criterion's past edits with their measured effect (the mean
after the edit minus the mean before), and asks a writer (rlpost/rewards/rubric_writer.py) for the new
criterion in one sentence. Output: the revised rubric (same names and weights, version + 1) and the new
records appended to the memory. The memory is what stops oscillation: an edit is not undone before its
cooldown, and a raise that made a criterion fail is reverted explicitly, once, instead of being
rewritten back and forth.

Choices where the abstract is silent: lexical retrieval (no embedding model offline), the thresholds
(0.9 / 0.3, window 5 steps, cooldown 5 steps), and the offline mode: the tool runs between training
segments (``rlpost revise-rubrics run=<dir>``, then ``resume`` or a new run with the revised rubric);
the asynchronous in-loop variant of the abstract is not built.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpost.core.chat import prompt_text
from rlpost.rewards.rubric import Criterion

MEMORY_FILE = "rubric_memory.jsonl"
STOP = frozenset("the response that with this have from does each their there which answer".split())
# a criterion that repeats the prompt's statistics is about training, not about the response (a small writer
# echoes "over the last 5 training steps they met it 30% of the time" back into its criterion)
ECHO = re.compile(r"training steps?|% of the time|\bmet it\b|grading criterion", re.IGNORECASE)
PROMPTS = {
    "raise": (
        "A grading criterion has become too easy: over the last {n} training steps responses met it {mean:.0%} "
        "of the time.\nCriterion: {text}\n{history}Responses that met it:\n{evidence}\n\n"
        "Write a stricter version of this criterion that asks for more than these responses do. Reply with the "
        "new criterion only, as one sentence that starts with 'The response'."
    ),
    "clarify": (
        "Responses keep failing a grading criterion: over the last {n} training steps they met it {mean:.0%} "
        "of the time.\nCriterion: {text}\n{history}Responses that failed:\n{evidence}\n\n"
        "Rewrite the criterion so that it says concretely what a good response must contain. Reply with the "
        "new criterion only, as one sentence that starts with 'The response'."
    ),
}


@dataclass(frozen=True)
class RevisionSettings:
    window: int = 5  # steps of evidence (the most recent)
    saturated: float = 0.9  # a criterion met at least this often is raised
    failing: float = 0.3  # a criterion met at most this often is clarified (or a raise reverted)
    cooldown: int = 5  # steps an edit is left alone to show its effect
    evidence: int = 3  # rollouts shown to the writer
    max_chars: int = 300  # the longest criterion accepted from the writer


@dataclass(frozen=True)
class Decision:
    criterion: str
    action: str  # raise | clarify | revert | keep
    reason: str
    mean: float | None
    new_text: str | None = None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def ingest(run_dir: Path, memory: list[dict[str, Any]], names: list[str]) -> list[dict[str, Any]]:
    """New ``step_summary`` and ``rollout_analysis`` records from the run's logs (steps not yet in memory)."""
    known = {r["step"] for r in memory if r["kind"] == "step_summary"}
    new: list[dict[str, Any]] = []
    for row in read_jsonl(run_dir / "metrics.jsonl"):
        step = row.get("step")
        scores = {n: row[f"rubric/{n}"] for n in names if f"rubric/{n}" in row}
        if step is None or step in known or not scores or "grad_norm" not in row:
            continue
        known.add(step)
        new.append({"kind": "step_summary", "step": step, "criteria": scores, "reward": row.get("reward")})
    seen = {r["step"] for r in memory if r["kind"] == "rollout_analysis"}
    samples = [s for s in read_jsonl(run_dir / "samples.jsonl") if s.get("step") not in seen]
    by_step: dict[int, list[dict]] = {}
    for s in samples:
        by_step.setdefault(int(s["step"]), []).append(s)
    for step, group in sorted(by_step.items()):
        median = statistics.median(float(s["reward"]) for s in group)
        for s in group:
            completion = s["completion"]
            text = completion if isinstance(completion, str) else "".join(m.get("content", "") for m in completion)
            new.append(
                {
                    "kind": "rollout_analysis",
                    "step": step,
                    "question": prompt_text(s["prompt"]),
                    "response": text,
                    "reward": float(s["reward"]),
                    "verdict": "success" if float(s["reward"]) >= median else "failure",
                }
            )
    return new


def window_mean(memory: list[dict[str, Any]], name: str, last: int, before: int | None = None) -> float | None:
    """The mean of criterion ``name`` over the last ``last`` step summaries (those at steps <= ``before``)."""
    values = [
        (r["step"], r["criteria"][name])
        for r in memory
        if r["kind"] == "step_summary" and name in r["criteria"] and (before is None or r["step"] <= before)
    ]
    recent = [v for _, v in sorted(values)[-last:]]
    return sum(recent) / len(recent) if recent else None


def edits_of(memory: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [r for r in memory if r["kind"] == "edit" and r["criterion"] == name]


def edit_effect(memory: list[dict[str, Any]], edit: dict[str, Any], window: int) -> float | None:
    """The criterion's mean over the steps after ``edit`` minus its mean before it (None: no step after)."""
    after = [
        r["criteria"][edit["criterion"]]
        for r in memory
        if r["kind"] == "step_summary" and r["step"] > edit["step"] and edit["criterion"] in r["criteria"]
    ][:window]
    if not after or edit.get("before") is None:
        return None
    return sum(after) / len(after) - edit["before"]


def decide(memory: list[dict[str, Any]], criterion: Criterion, s: RevisionSettings) -> Decision:
    """What to do with ``criterion`` given the memory (module docstring's rule)."""
    latest = max((r["step"] for r in memory if r["kind"] == "step_summary"), default=None)
    mean = window_mean(memory, criterion.name, s.window)
    if mean is None or latest is None:
        return Decision(criterion.name, "keep", "no step summary names it", None)
    past = edits_of(memory, criterion.name)
    last = past[-1] if past else None
    if last is not None and latest - last["step"] < s.cooldown:
        return Decision(criterion.name, "keep", f"edited at step {last['step']}, within the cooldown", mean)
    if mean >= s.saturated and (last is None or last["action"] != "revert"):
        return Decision(criterion.name, "raise", f"met {mean:.0%} of the time over the last steps: saturated", mean)
    if mean <= s.failing and last is not None and last["action"] == "raise":
        return Decision(
            criterion.name, "revert", f"met {mean:.0%} since it was raised at step {last['step']}", mean, last["old"]
        )
    if mean <= s.failing:
        return Decision(criterion.name, "clarify", f"met {mean:.0%} of the time over the last steps: failing", mean)
    return Decision(criterion.name, "keep", f"met {mean:.0%} of the time: neither saturated nor failing", mean)


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in STOP}


def retrieve(memory: list[dict[str, Any]], criterion: Criterion, verdict: str, s: RevisionSettings) -> list[dict]:
    """The ``evidence`` recent rollouts of ``verdict`` most relevant to the criterion (word overlap, then recency)."""
    steps = sorted({r["step"] for r in memory if r["kind"] == "rollout_analysis"})[-s.window :]
    pool = [r for r in memory if r["kind"] == "rollout_analysis" and r["step"] in steps and r["verdict"] == verdict]
    key = words(criterion.text)
    return sorted(pool, key=lambda r: (-len(key & words(r["question"] + " " + r["response"])), -r["step"]))[
        : s.evidence
    ]


def writer_prompt(memory: list[dict[str, Any]], criterion: Criterion, decision: Decision, s: RevisionSettings) -> str:
    verdict = "success" if decision.action == "raise" else "failure"
    shown = retrieve(memory, criterion, verdict, s)
    evidence = "\n".join(f"- Q: {r['question'][:200]} A: {r['response'][:300]}" for r in shown) or "- (none logged)"
    lines = []
    for edit in edits_of(memory, criterion.name):
        effect = edit_effect(memory, edit, s.window)
        change = "not measured yet" if effect is None else f"its mean changed by {effect:+.2f}"
        lines.append(f"- step {edit['step']}: {edit['action']} '{edit['old']}' -> '{edit['new']}' ({change})")
    history = ("Past edits of this criterion:\n" + "\n".join(lines) + "\n") if lines else ""
    template = PROMPTS[decision.action]
    return template.format(
        n=s.window, mean=decision.mean or 0.0, text=criterion.text, history=history, evidence=evidence
    )


def parse_criterion(reply: str | None, old: str, max_chars: int) -> str | None:
    """The writer's new criterion: its first non-empty line without bullets or quotes; None when unusable (too
    short or long, unchanged, or echoing the prompt's statistics instead of saying what a response must do)."""
    if not reply:
        return None
    for line in reply.splitlines():
        text = line.strip().lstrip("-*0123456789.) ").strip().strip('"').strip("'").strip()
        if text:
            ok = 10 <= len(text) <= max_chars and text.lower() != old.lower() and not ECHO.search(text)
            return text if ok else None
    return None
