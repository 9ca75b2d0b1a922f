"""AMARIS (seed 004 #17): the evaluation memory and the decision rule of rubric revision, read by the in-loop
reviser (rubric_revision.py, ``reward.terms[i].params.revise``) and by ``rlpost revise-rubrics`` between segments.

A persistent **evaluation memory** (``rubric_memory.jsonl`` in the run directory, one record per line):

- ``step_summary``: a training step's batch mean of every criterion (``rubric/<name>``) and of the reward;
- ``rollout_analysis``: a rollout with its step, question, response, reward and verdict (``success`` when its
  reward is at least its step's median, else ``failure``);
- ``edit``: a rubric update: version, step, criterion, action, old and new text, the criterion's mean
  over the window before it.

Instance-specific rubrics (a per-row rubric column): every record carries ``instance``, the id of the row's
rubric (``instance_id``); a global rubric's records have none (``None``). Means, edits and evidence are
read per instance, so each row's rubric is revised from its own history.

A revision reads the memory and decides, per criterion of the current rubric, from the last ``window``
step summaries' mean ``m`` (the longitudinal evidence, not the last batch)::

    last edit of the criterion less than ``cooldown`` steps ago     -> keep (let the edit show its effect)
    m >= saturated, and the last edit was not a revert              -> raise: a stricter criterion (curriculum)
    m <= failing and the last edit raised it                        -> revert to the text before that edit
    m <= failing                                                    -> clarify: a more concrete criterion
    otherwise                                                       -> keep

For ``raise`` and ``clarify`` it retrieves evidence: the recent rollouts (the instance's last ``window``
steps) most relevant to the criterion, successes for raise and failures for clarify, ``evidence`` of them;
the criterion's past edits with their measured effect (the mean after the edit minus the mean before); and
the ``related`` past edits of other criteria (or other instances) whose old text is most relevant to this
criterion, with their effect. Relevance is ``retrieval``: ``semantic``, the cosine similarity of sentence
embeddings (an ``Embed`` callable: texts [M] -> [M, D]; rubric_revision.py passes MiniLM,
rlpost/rewards/embeddings.py), or ``lexical``, the number of shared content words; ties go to the more
recent record. A writer (rlpost/rewards/rubric_writer.py) then writes the new criterion in one sentence.
The memory is what stops oscillation: an edit is not undone before its cooldown, and a raise that made a
criterion fail is reverted explicitly, once, instead of being rewritten back and forth.

Choices where the abstract is silent: the thresholds (0.9 / 0.3, window 5 steps, cooldown 5 steps), the
embedding model (all-MiniLM-L6-v2, the package's sentence embedder), what is embedded (the criterion text
against the rollout's question and response, and against a past edit's old text).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import torch

from rlpost.core.chat import prompt_text

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
Embed = Callable[[list[str]], torch.Tensor]  # texts [M] -> embeddings [M, D] (any norm: cosine is taken)


class CriterionLike(Protocol):
    """What the memory reads of a criterion (rlpost.rewards.rubric.Criterion; not imported: rubric.py imports
    this module's reader, rubric_revision.py)."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class RevisionSettings:
    window: int = 5  # steps of evidence (the most recent)
    saturated: float = 0.9  # a criterion met at least this often is raised
    failing: float = 0.3  # a criterion met at most this often is clarified (or a raise reverted)
    cooldown: int = 5  # steps an edit is left alone to show its effect
    evidence: int = 3  # rollouts shown to the writer
    max_chars: int = 300  # the longest criterion accepted from the writer
    retrieval: Literal["semantic", "lexical"] = "semantic"  # how relevance is scored (module docstring)
    related: int = 2  # past edits of other criteria / instances shown to the writer


@dataclass(frozen=True)
class Decision:
    criterion: str
    action: str  # raise | clarify | revert | keep
    reason: str
    mean: float | None
    new_text: str | None = None
    instance: str | None = None  # the row rubric's id (None: the global rubric)


def instance_id(key: str) -> str:
    """A per-row rubric (its column value, as text) -> a short stable id (the memory's ``instance``)."""
    return hashlib.sha1(key.encode("utf-8")).hexdigest()[:12]


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rollout_records(step: int, rows: list[dict[str, Any]], chars: int | None = None) -> list[dict[str, Any]]:
    """One step's rollouts ``rows`` [{question, response, reward, instance?}] -> ``rollout_analysis`` records; the
    verdict compares each reward with the median of its step (of its instance's rollouts at that step)."""
    by_instance: dict[str | None, list[float]] = {}
    for r in rows:
        by_instance.setdefault(r.get("instance"), []).append(float(r["reward"]))
    medians = {k: statistics.median(v) for k, v in by_instance.items()}
    out = []
    for r in rows:
        record = {
            "kind": "rollout_analysis",
            "step": step,
            "question": r["question"][:chars],
            "response": r["response"][:chars],
            "reward": float(r["reward"]),
            "verdict": "success" if float(r["reward"]) >= medians[r.get("instance")] else "failure",
        }
        if r.get("instance") is not None:
            record["instance"] = r["instance"]
        out.append(record)
    return out


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
        rows = []
        for s in group:
            completion = s["completion"]
            text = completion if isinstance(completion, str) else "".join(m.get("content", "") for m in completion)
            rows.append({"question": prompt_text(s["prompt"]), "response": text, "reward": float(s["reward"])})
        new += rollout_records(step, rows)
    return new


def _summaries(memory: list[dict[str, Any]], instance: str | None) -> list[dict[str, Any]]:
    return [r for r in memory if r["kind"] == "step_summary" and r.get("instance") == instance]


def window_mean(
    memory: list[dict[str, Any]], name: str, last: int, before: int | None = None, instance: str | None = None
) -> float | None:
    """The mean of criterion ``name`` over the last ``last`` step summaries (of ``instance``, at steps <= ``before``)."""
    values = [
        (r["step"], r["criteria"][name])
        for r in _summaries(memory, instance)
        if name in r["criteria"] and (before is None or r["step"] <= before)
    ]
    recent = [v for _, v in sorted(values)[-last:]]
    return sum(recent) / len(recent) if recent else None


def edits_of(memory: list[dict[str, Any]], name: str, instance: str | None = None) -> list[dict[str, Any]]:
    return [r for r in memory if r["kind"] == "edit" and r["criterion"] == name and r.get("instance") == instance]


def edit_effect(memory: list[dict[str, Any]], edit: dict[str, Any], window: int) -> float | None:
    """The criterion's mean over the steps after ``edit`` minus its mean before it (None: no step after)."""
    after = [
        r["criteria"][edit["criterion"]]
        for r in _summaries(memory, edit.get("instance"))
        if r["step"] > edit["step"] and edit["criterion"] in r["criteria"]
    ][:window]
    if not after or edit.get("before") is None:
        return None
    return sum(after) / len(after) - edit["before"]


def decide(
    memory: list[dict[str, Any]], criterion: CriterionLike, s: RevisionSettings, instance: str | None = None
) -> Decision:
    """What to do with ``criterion`` (of ``instance``'s rubric) given the memory (module docstring's rule)."""
    latest = max((r["step"] for r in memory if r["kind"] == "step_summary"), default=None)
    mean = window_mean(memory, criterion.name, s.window, instance=instance)
    name = criterion.name
    if mean is None or latest is None:
        return Decision(name, "keep", "no step summary names it", None, instance=instance)
    past = edits_of(memory, name, instance)
    last = past[-1] if past else None
    if last is not None and latest - last["step"] < s.cooldown:
        return Decision(name, "keep", f"edited at step {last['step']}, within the cooldown", mean, instance=instance)
    if mean >= s.saturated and (last is None or last["action"] != "revert"):
        reason = f"met {mean:.0%} of the time over the last steps: saturated"
        return Decision(name, "raise", reason, mean, instance=instance)
    if mean <= s.failing and last is not None and last["action"] == "raise":
        reason = f"met {mean:.0%} since it was raised at step {last['step']}"
        return Decision(name, "revert", reason, mean, last["old"], instance=instance)
    if mean <= s.failing:
        return Decision(
            name, "clarify", f"met {mean:.0%} of the time over the last steps: failing", mean, instance=instance
        )
    return Decision(name, "keep", f"met {mean:.0%} of the time: neither saturated nor failing", mean, instance=instance)


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z]{3,}", text.lower()) if w not in STOP}


def relevance(query: str, texts: list[str], s: RevisionSettings, embed: Embed | None) -> list[float]:
    """How relevant each of ``texts`` [M] is to ``query``: with ``retrieval=semantic`` the cosine similarity of
    their embeddings, ``cos(e_q, e_m) = e_q . e_m / (|e_q| |e_m|)``; with ``lexical`` the number of content words
    they share."""
    if not texts:
        return []
    if s.retrieval == "lexical":
        key = words(query)
        return [float(len(key & words(t))) for t in texts]
    if embed is None:
        raise ValueError("retrieval=semantic needs an embed function (texts [M] -> embeddings [M, D])")
    e = torch.nn.functional.normalize(embed([query, *texts]).float(), dim=-1)  # [1 + M, D]
    return (e[1:] @ e[0]).tolist()


def retrieve(
    memory: list[dict[str, Any]],
    criterion: CriterionLike,
    verdict: str,
    s: RevisionSettings,
    embed: Embed | None = None,
    instance: str | None = None,
) -> list[dict]:
    """The ``evidence`` rollouts of ``verdict`` from ``instance``'s last ``window`` steps most relevant to the
    criterion (``relevance`` of ``question + response`` to its text; ties: the more recent)."""
    mine = [r for r in memory if r["kind"] == "rollout_analysis" and r.get("instance") == instance]
    steps = sorted({r["step"] for r in mine})[-s.window :]
    pool = [r for r in mine if r["step"] in steps and r["verdict"] == verdict]
    return most_relevant(
        criterion.text, pool, [r["question"] + " " + r["response"] for r in pool], s.evidence, s, embed
    )


def related_edits(
    memory: list[dict[str, Any]],
    criterion: CriterionLike,
    s: RevisionSettings,
    embed: Embed | None = None,
    instance: str | None = None,
) -> list[dict]:
    """The ``related`` past edits of other criteria or other instances whose old text is most relevant to this
    criterion's text (ties: the more recent): what the memory learnt about similar wording elsewhere."""
    others = [
        r for r in memory if r["kind"] == "edit" and (r["criterion"], r.get("instance")) != (criterion.name, instance)
    ]
    if not others or s.related == 0:
        return []
    return most_relevant(criterion.text, others, [r["old"] for r in others], s.related, s, embed)


def most_relevant(
    query: str, records: list[dict], texts: list[str], k: int, s: RevisionSettings, embed: Embed | None
) -> list[dict]:
    """The ``k`` records [M] whose texts [M] are most relevant to ``query`` (ties: the more recent step)."""
    scores = relevance(query, texts, s, embed)
    ranked = sorted(zip(scores, records), key=lambda p: (-p[0], -p[1]["step"]))
    return [r for _, r in ranked[:k]]


def _edit_line(memory: list[dict[str, Any]], edit: dict[str, Any], window: int) -> str:
    effect = edit_effect(memory, edit, window)
    change = "not measured yet" if effect is None else f"its mean changed by {effect:+.2f}"
    return f"- step {edit['step']}: {edit['action']} '{edit['old']}' -> '{edit['new']}' ({change})"


def writer_prompt(
    memory: list[dict[str, Any]],
    criterion: CriterionLike,
    decision: Decision,
    s: RevisionSettings,
    embed: Embed | None = None,
) -> str:
    verdict = "success" if decision.action == "raise" else "failure"
    shown = retrieve(memory, criterion, verdict, s, embed, decision.instance)
    evidence = "\n".join(f"- Q: {r['question'][:200]} A: {r['response'][:300]}" for r in shown) or "- (none logged)"
    own = [_edit_line(memory, e, s.window) for e in edits_of(memory, criterion.name, decision.instance)]
    history = ("Past edits of this criterion:\n" + "\n".join(own) + "\n") if own else ""
    related = [_edit_line(memory, e, s.window) for e in related_edits(memory, criterion, s, embed, decision.instance)]
    if related:
        history += "Past edits of similar criteria:\n" + "\n".join(related) + "\n"
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
