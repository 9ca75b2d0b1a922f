"""AMARIS in the training loop (seed 004 #17): ``reward.terms[i].params.revise`` on the rubric reward.

"AMARIS runs asynchronously alongside the normal RL loop, reducing blocking latency relative to synchronous
rubric updates." The rubric reward (rubric.py) holds one ``RubricReviser``; on training batches only:

1. **Step boundary** (the first reward call of a new step ``t``, t = TRL's ``global_step + 1``): a revision that
   finished in the background is swapped in, whole (one reference assignment on the training thread, before any
   row of step ``t`` is judged: a step never sees half a rubric). Step ``t - 1`` is closed: its summaries and
   rollouts are final, written to ``<run>/rubric_memory.jsonl``. If ``every`` steps closed since the start or the
   last request (t - 1 >= every, then t - t_last >= every) and none is running, a revision is requested from the
   memory as it stands (evidence through step ``t - 1``).
2. **Scoring** with the rubric in force; every row's criterion scores go into the memory
   (rubric_memory.py): the step's summary per instance (each criterion's batch mean) and its rollouts.
3. **The revision** (``asynchronous: true``) runs on one background thread: the decision rule per criterion,
   retrieval (semantic: MiniLM embeddings; or lexical), the writer's calls for raise and clarify, the new
   rubric. Training goes on meanwhile; the result lands at the first step boundary after it finished.
   ``asynchronous: false`` runs it at the boundary on the training thread (the synchronous baseline).

An edit that lands at step ``t`` is recorded at step ``t - 1``, the last step judged by the old text, so the
edit's measured effect (mean after minus mean before) only counts steps judged by the new one. Logged per
training step: ``amaris/revisions`` (the revisions applied so far that changed a criterion: the rubric's version),
``amaris/pending`` (1 while a revision is computing after the boundary), ``amaris/edits`` (criteria changed at this
boundary) and ``amaris/blocking_saved_s`` (the seconds the landing revision ran while training continued: its
compute time minus any time the training thread waited for it; 0 when synchronous).

Instance-specific rubrics (``rubric_column``): each row's rubric is one instance (id: rubric_memory.instance_id of
its text); its summaries, edits and evidence are its own, and a revision rewrites that row's rubric only (the
rows sharing the rubric text share the revision). At most ``max_edits`` criteria change per revision, the most
extreme first (distance of the mean from the threshold it crossed).

Checkpoints: ``state_dict`` holds the memory, the revised rubrics, the version, the step and request counters,
the open step's rows and a revision still running as its request (the memory prefix and step it read); on
resume that request is computed again, so no revision is lost. The run directory (``run_dir``, set by
rlpost/train.py on the main process only, so other ranks write nothing) gets the memory appended at each closed
step and each revision, ``rubrics/rubric_v<N>.yaml`` (global) or ``rubrics/<instance>_v<N>.yaml`` (per row); on
resume the file is cut back to the checkpoint's steps first. ``rlpost revise-rubrics run=<dir>`` reads the same
file. The memory in a checkpoint keeps the rollouts of each instance's last ``window`` steps only (the file keeps
all; retrieval reads no older ones); responses are cut to ``response_chars``.

Choices where the abstract is silent: one revision in flight at a time; a step's evidence closes at the next
step's boundary (a failing batch call retried per sample adds to the same step); the writer and embedder are
separate from the policy; one process only (per-process memories would revise each rank's rubric differently:
refused in ``Rubric.check_run``).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.rewards.base import ParamError
from rlpost.rewards.rubric_memory import (
    MEMORY_FILE,
    Decision,
    Embed,
    RevisionSettings,
    decide,
    parse_criterion,
    read_jsonl,
    rollout_records,
    writer_prompt,
)

logger = logging.getLogger(__name__)
Writer = Callable[[list[str]], list[str | None]]  # prompts [M] -> replies [M] (None: failed)


@dataclass(frozen=True)
class ReviseConfig:
    enabled: bool = False  # revise the rubric during training (AMARIS)
    every: Annotated[int, Range(ge=1)] = 5  # steps between revision requests
    asynchronous: bool = True  # false: the revision blocks the step boundary (the synchronous baseline)
    window: Annotated[int, Range(ge=1)] = 5  # the most recent steps (of an instance) whose means are the evidence
    saturated: Annotated[float, Range(ge=0, le=1)] = 0.9  # mean at or above: raise the criterion
    failing: Annotated[float, Range(ge=0, le=1)] = 0.3  # mean at or below: clarify it (or revert a raise)
    cooldown: Annotated[int, Range(ge=0)] = 5  # steps an edit is left alone
    evidence: Annotated[int, Range(ge=0)] = 3  # rollouts shown to the writer
    related: Annotated[int, Range(ge=0)] = 2  # past edits of similar criteria shown to the writer
    retrieval: Literal["semantic", "lexical"] = "semantic"  # MiniLM cosine similarity | shared content words
    embed_device: Literal["cpu", "cuda"] = "cpu"  # where the MiniLM embedder runs (semantic retrieval)
    max_edits: Annotated[int, Range(ge=1)] = 4  # criteria changed per revision at most (the most extreme first)
    max_chars: Annotated[int, Range(ge=10)] = 300  # the longest criterion accepted from the writer
    response_chars: Annotated[int, Range(ge=1)] = 1000  # characters of a question / response kept in memory
    writer: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 64})  # rubric_writer.WriterConfig

    def __post_init__(self) -> None:
        if self.failing >= self.saturated:
            raise ValueError(f"failing={self.failing} must be below saturated={self.saturated}")

    def settings(self) -> RevisionSettings:
        return RevisionSettings(
            self.window, self.saturated, self.failing, self.cooldown, self.evidence, self.max_chars, self.retrieval,
            self.related,
        )  # fmt: skip


@dataclass(frozen=True)
class Revision:
    """A finished revision: the new rubrics of the instances it changed and the memory records to add."""

    request: int  # the step whose evidence it read (the last closed step)
    decisions: list[Decision]
    rubrics: dict[str | None, tuple[Any, ...]]  # instance -> its whole new rubric (criteria); only changed ones
    seconds: float  # its compute time (decisions, retrieval, writer)


@dataclass
class Request:
    step: int  # the last closed step when it was made
    records: int  # the memory prefix it reads
    started: float = 0.0  # time.perf_counter() when submitted


def extremity(d: Decision, s: RevisionSettings) -> float:
    """How far a decision's mean is past the threshold it crossed (``max_edits`` keeps the largest)."""
    m = d.mean or 0.0
    return m - s.saturated if d.action == "raise" else s.failing - m


def compute_revision(
    memory: list[dict[str, Any]],
    rubrics: dict[str | None, tuple[Any, ...]],
    s: RevisionSettings,
    max_edits: int,
    writer: Writer,
    embed: Embed | None,
    step: int,
) -> Revision:
    """The revision of every instance's rubric ``rubrics`` from ``memory`` (pure but for the writer's calls)."""
    started = time.perf_counter()
    found = [(inst, c, decide(memory, c, s, inst)) for inst, criteria in rubrics.items() for c in criteria]
    changes = sorted(
        (x for x in found if x[2].action in ("raise", "clarify", "revert")), key=lambda x: -extremity(x[2], s)
    )[:max_edits]
    asks = [x for x in changes if x[2].action in ("raise", "clarify")]
    replies = writer([writer_prompt(memory, c, d, s, embed) for _, c, d in asks]) if asks else []
    texts = {(inst, c.name): parse_criterion(r, c.text, s.max_chars) for (inst, c, _), r in zip(asks, replies)}
    decisions: list[Decision] = []
    new: dict[str | None, dict[str, str]] = {}
    for inst, c, d in changes:
        text = d.new_text if d.action == "revert" else texts.get((inst, c.name))
        if text:
            decisions.append(replace(d, new_text=text))
            new.setdefault(inst, {})[c.name] = text
        else:
            decisions.append(replace(d, action="keep", reason=f"{d.reason}; the writer gave no usable criterion"))
    out = {inst: tuple(replace(c, text=new[inst].get(c.name, c.text)) for c in rubrics[inst]) for inst in new}
    return Revision(step, decisions, out, time.perf_counter() - started)


class RubricReviser:
    """The evaluation memory and the background revision of one rubric reward (module docstring)."""

    def __init__(self, cfg: ReviseConfig, writer: Writer, embed: Embed | None = None):
        self.cfg, self.settings = cfg, cfg.settings()
        self.writer, self.embed = writer, embed
        self.memory: list[dict[str, Any]] = []
        self.rubrics: dict[str | None, tuple[Any, ...]] = {}  # instance -> the rubric in force (base or revised)
        self.revised: dict[str | None, tuple[Any, ...]] = {}  # instance -> its revised rubric (what overrides)
        self.version = 0  # revisions applied that changed a criterion
        self.open_step: int | None = None  # the step being scored
        self.open_rows: list[dict[str, Any]] = []  # its rows so far: instance, question, response, reward, scores
        self.last_request: int | None = None
        self.request: Request | None = None  # the revision in flight
        self.future: Future[Revision] | None = None
        self.waited = 0.0  # seconds the training thread waited for the revision in flight
        self.run_dir: Path | None = None  # the main process's run directory (rlpost/train.py): the memory file
        self.flushed = 0  # memory records already in the file
        self.cut_file_after: int | None = None  # after a resume: drop the file's records past this step first
        self.last: dict[str, float] = {}  # this boundary's amaris/* figures
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    # ---- what the reward reads -----------------------------------------------------------------
    def current(self, instance: str | None, base: list[Any]) -> list[Any]:
        """The rubric in force for ``instance`` (its revision, else ``base``); remembered for the next request."""
        revised = self.revised.get(instance)
        if revised is not None:
            return list(revised)
        self.rubrics[instance] = tuple(base)
        return base

    # ---- the step boundary -----------------------------------------------------------------------
    def boundary(self, step: int) -> None:
        """Called before a training batch of ``step`` is judged: swap in a finished revision, close the previous
        step, request a revision when ``every`` steps passed."""
        if step == self.open_step:
            return  # another call of the same step (a retried batch)
        edits, saved = 0, 0.0
        if self.future is not None and self.future.done():
            edits, saved = self._land(step)
        if self.open_step is not None:
            self._close()
        self.open_step, self.open_rows = step, []
        closed = max((r["step"] for r in self.memory if r["kind"] == "step_summary"), default=None)
        due = step - (self.last_request or 1) >= self.cfg.every  # `every` closed steps since the start / last request
        if closed is not None and due and self.future is None:
            self.last_request = step
            self._submit(Request(closed, len(self.memory)))
            if not self.cfg.asynchronous:  # the synchronous baseline: lands at this boundary
                edits, saved = self._land(step)
                saved = 0.0
        self.last = {
            "amaris/revisions": float(self.version),
            "amaris/pending": float(self.future is not None),
            "amaris/edits": float(edits),
            "amaris/blocking_saved_s": saved,
        }
        self._flush()

    def _submit(self, request: Request) -> None:
        request.started = time.perf_counter()
        memory, rubrics = self.memory[: request.records], dict(self.rubrics)
        args = (memory, rubrics, self.settings, self.cfg.max_edits, self.writer, self.embed, request.step)
        self.request, self.waited = request, 0.0
        if self.cfg.asynchronous:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="amaris-revision")
            self.future = self._executor.submit(compute_revision, *args)
        else:
            self.future = Future()
            self.future.set_result(compute_revision(*args))

    def wait(self) -> None:
        """Block until the revision in flight (if any) has finished; it still lands at the next boundary."""
        if self.future is not None and not self.future.done():
            started = time.perf_counter()
            self.future.exception()
            self.waited += time.perf_counter() - started

    def _land(self, step: int) -> tuple[int, float]:
        """The finished revision in flight, applied at ``step``'s boundary; one that raised is dropped with a warning
        (a writer failure must not fail the step's rewards)."""
        assert self.future is not None
        err = self.future.exception()
        if err is not None:
            logger.warning("AMARIS revision requested at step %s failed, rubric kept: %s", self.last_request, err)
            self.future, self.request = None, None
            return 0, 0.0
        return self._apply(self.future.result(), step)

    def _apply(self, revision: Revision, step: int) -> tuple[int, float]:
        """Swap the revision in at ``step``'s boundary and log its edits (recorded at ``step - 1``)."""
        assert self.request is not None
        saved = max(0.0, revision.seconds - self.waited)
        self.future, self.request = None, None
        changed = [d for d in revision.decisions if d.action != "keep"]
        if not changed:
            return 0, saved
        self.version += 1
        for d in changed:
            inst = d.instance
            old = next(c.text for c in self.rubrics[inst] if c.name == d.criterion)
            record = {"kind": "edit", "version": self.version, "step": step - 1, "requested": revision.request,
                      "criterion": d.criterion, "action": d.action, "old": old, "new": d.new_text, "before": d.mean}  # fmt: skip
            if inst is not None:
                record["instance"] = inst
            self.memory.append(record)
        # the swap: new dicts assigned whole, on the training thread, before any row of this step is judged
        self.revised = {**self.revised, **revision.rubrics}
        self.rubrics = {**self.rubrics, **revision.rubrics}
        for inst, criteria in revision.rubrics.items():
            path = self._write_rubric(inst, criteria)
            record = {"kind": "revision", "version": self.version, "step": step - 1, "path": str(path or "")}
            if inst is not None:
                record["instance"] = inst
            self.memory.append(record)
        return len(changed), saved

    # ---- recording -----------------------------------------------------------------------------
    def record(self, rows: list[dict[str, Any]]) -> None:
        """Rows judged at the open step: ``{instance, question, response, reward, scores: {criterion: s}}``."""
        self.open_rows += rows

    def _close(self) -> None:
        """The open step's summaries (each instance's criterion means) and rollouts go into the memory."""
        step, rows = self.open_step, self.open_rows
        assert step is not None
        by_inst: dict[str | None, list[dict[str, Any]]] = {}
        for r in rows:
            by_inst.setdefault(r["instance"], []).append(r)
        for inst, group in by_inst.items():
            criteria: dict[str, list[float]] = {}
            for r in group:
                for name, s in r["scores"].items():
                    criteria.setdefault(name, []).append(s)
            rewards = [r["reward"] for r in group if r["reward"] is not None]
            record: dict[str, Any] = {"kind": "step_summary", "step": step,
                                      "criteria": {n: sum(v) / len(v) for n, v in criteria.items()},
                                      "reward": sum(rewards) / len(rewards) if rewards else None}  # fmt: skip
            if inst is not None:
                record["instance"] = inst
            if record["criteria"]:
                self.memory.append(record)
        scored = [r for r in rows if r["reward"] is not None]
        self.memory += rollout_records(step, scored, self.cfg.response_chars)
        self._prune()

    def _prune(self) -> None:
        """Keep each instance's rollouts of its last ``window`` steps (retrieval reads no older ones), except those a
        running request still reads (its prefix is fixed)."""
        keep_steps: dict[str | None, set[int]] = {}
        for r in self.memory:
            if r["kind"] == "rollout_analysis":
                keep_steps.setdefault(r.get("instance"), set()).add(r["step"])
        recent = {k: set(sorted(v)[-self.cfg.window :]) for k, v in keep_steps.items()}
        fixed = self.request.records if self.request is not None else 0
        drop = {
            i
            for i, r in enumerate(self.memory)
            if i >= fixed and r["kind"] == "rollout_analysis" and r["step"] not in recent[r.get("instance")]
        }
        if drop:
            self.flushed -= sum(1 for i in drop if i < self.flushed)
            self.memory = [r for i, r in enumerate(self.memory) if i not in drop]

    # ---- the run directory (main process) --------------------------------------------------------
    def _flush(self) -> None:
        if self.run_dir is None:
            self.flushed = len(self.memory)
            return
        path = self.run_dir / MEMORY_FILE
        with self._lock:
            if self.cut_file_after is not None:  # resumed: the file may hold steps after the checkpoint
                kept = [r for r in read_jsonl(path) if r.get("step", 0) <= self.cut_file_after]
                path.write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
                self.cut_file_after = None
            new = self.memory[self.flushed :]
            if new:
                with path.open("a", encoding="utf-8") as f:
                    f.write("".join(json.dumps(r) + "\n" for r in new))
            self.flushed = len(self.memory)

    def _write_rubric(self, instance: str | None, criteria: tuple[Any, ...]) -> Path | None:
        if self.run_dir is None:
            return None
        import yaml

        from rlpost.runs.rundir import write_atomic

        name = f"rubric_v{self.version}.yaml" if instance is None else f"{instance}_v{self.version}.yaml"
        path = self.run_dir / "rubrics" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = {"criteria": [{"name": c.name, "text": c.text, "weight": c.weight} for c in criteria]}
        write_atomic(path, f"# AMARIS in-loop revision {self.version}\n" + yaml.safe_dump(body, sort_keys=False))
        return path

    # ---- checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        def rubric(criteria: tuple[Any, ...]) -> list[dict[str, Any]]:
            return [asdict(c) for c in criteria]

        pending = None if self.request is None else {"step": self.request.step, "records": self.request.records}
        return {
            "memory": json.dumps(self.memory),
            "rubrics": json.dumps([[k, rubric(v)] for k, v in self.rubrics.items()]),
            "revised": json.dumps([[k, rubric(v)] for k, v in self.revised.items()]),
            "version": self.version,
            "open_step": self.open_step,
            "open_rows": json.dumps(self.open_rows),
            "last_request": self.last_request,
            "pending": json.dumps(pending),
        }

    def load_state_dict(self, state: dict[str, Any], make: Callable[[dict[str, Any]], Any]) -> None:
        """Restore ``state_dict``; ``make`` turns a saved criterion dict back into a criterion. A revision that was
        running at the checkpoint is computed again from the same memory prefix."""

        def rubrics(text: str) -> dict[str | None, tuple[Any, ...]]:
            return {k: tuple(make(c) for c in v) for k, v in json.loads(text)}

        self.memory = json.loads(state["memory"])
        self.rubrics, self.revised = rubrics(state["rubrics"]), rubrics(state["revised"])
        self.version, self.last_request = int(state["version"]), state["last_request"]
        self.open_step, self.open_rows = state["open_step"], json.loads(state["open_rows"])
        self.future, self.request, self.flushed = None, None, len(self.memory)
        self.cut_file_after = self.open_step - 1 if self.open_step is not None else 0
        # the file holds every record up to the checkpoint's closed steps; later lines are cut on the next flush
        pending = json.loads(state["pending"])
        if pending is not None:
            self._submit(Request(int(pending["step"]), int(pending["records"])))

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False)


def build_reviser(node: dict[str, Any] | None) -> RubricReviser | None:
    """The rubric reward's ``revise`` node -> its in-loop reviser (None: off); the writer and embedder are checked
    (ParamError naming the key), not loaded."""
    from rlpost.core.schema import build_config, check_paths
    from rlpost.rewards.rubric_writer import RubricWriter, WriterConfig

    try:
        revise = build_config(ReviseConfig, dict(node or {}), "")
    except ConfigError as err:
        raise ParamError("revise", str(err).lstrip(": ")) from None
    try:  # checked even when off: a bad key fails before any run
        writer_cfg = build_config(WriterConfig, dict(revise.writer or {}), "")
        check_paths(writer_cfg, "revise.writer")
        writer = RubricWriter(writer_cfg)
    except ConfigError as err:
        raise ParamError("revise.writer", str(err).lstrip(": ")) from None
    if not revise.enabled:
        return None
    embed = None
    if revise.retrieval == "semantic":
        from functools import partial

        from rlpost.rewards.embeddings import embed as minilm
        from rlpost.rewards.embeddings import minilm_folder

        try:
            minilm_folder()  # the wheel is there (the error names its install)
        except ConfigError as err:
            raise ParamError("revise.retrieval", f"semantic: {err} Or set retrieval=lexical.") from None
        embed = partial(minilm, device=revise.embed_device)
    return RubricReviser(revise, writer.write, embed)
