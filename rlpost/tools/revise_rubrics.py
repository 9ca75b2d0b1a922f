"""``rlpost revise-rubrics``: revise a run's rubric from its evaluation memory (AMARIS, seed 004 #17).

    rlpost revise-rubrics run=<run dir>                                  # the run's rubric file, local SmolLM2 writer
    rlpost revise-rubrics run=<run dir> writer.model.source=qwen2_5_coder saturated=0.8
    rlpost train reward=rubric reward.terms.0.params.rubric=<run dir>/rubrics/rubric_v1.yaml resume=<run dir>

The run must log its criteria (``reward=rubric`` with a rubric file logs ``rubric/<name>`` every step).
Reads ``metrics.jsonl`` and ``samples.jsonl`` into ``rubric_memory.jsonl`` (the persistent memory,
rlpost/rewards/rubric_memory.py), decides per criterion (raise / clarify / revert / keep), asks the writer for
the new criteria, writes ``rubrics/rubric_v<N>.yaml`` when anything changed, and appends the edits to
the memory. One writer per file: the memory is rewritten whole through a temporary file. The same memory file
is what a run with ``reward.terms.0.params.revise.enabled=true`` keeps during training (rubric_revision.py); this
tool is the between-segments variant.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range


@dataclass(frozen=True)
class ReviseSettings:
    run: str | None = None  # the run directory (required)
    rubric: str | None = None  # the rubric file to revise (null: the run's reward=rubric file, or its latest revision)
    memory: str | None = None  # the evaluation memory (null: <run>/rubric_memory.jsonl)
    out: str | None = None  # the revised rubric (null: <run>/rubrics/rubric_v<N>.yaml)
    window: Annotated[int, Range(ge=1)] = 5  # steps of evidence
    saturated: Annotated[float, Range(ge=0, le=1)] = 0.9  # mean at or above: raise the criterion
    failing: Annotated[float, Range(ge=0, le=1)] = 0.3  # mean at or below: clarify it (or revert a raise)
    cooldown: Annotated[int, Range(ge=0)] = 5  # steps an edit is left alone
    evidence: Annotated[int, Range(ge=0)] = 3  # rollouts shown to the writer
    max_chars: Annotated[int, Range(ge=10)] = 300  # the longest criterion accepted
    retrieval: Literal["semantic", "lexical"] = "semantic"  # relevance: MiniLM cosine similarity | shared words
    related: Annotated[int, Range(ge=0)] = 2  # past edits of similar criteria shown to the writer
    writer: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 64})  # rubric_writer.WriterConfig


def run_rubric(s: ReviseSettings, run_dir: Path, memory: list[dict]) -> Path:
    """The rubric to revise: ``rubric=``, else the latest revision in memory, else the run's rubric file."""
    if s.rubric:
        return Path(s.rubric).expanduser()
    revisions = [r["path"] for r in memory if r["kind"] == "revision"]
    if revisions:
        return Path(revisions[-1])
    from rlpost.core.schema import resolve_data_path
    from rlpost.models.weights import run_config

    terms = (run_config(run_dir).get("reward") or {}).get("terms") or []
    files = [
        t["params"]["rubric"] for t in terms if t.get("name") == "rubric" and (t.get("params") or {}).get("rubric")
    ]
    if not files:
        raise ConfigError(
            f"run={s.run!r} has no reward term rubric with a rubric file (per-row rubrics are not logged per "
            "criterion); give rubric=<file>."
        )
    return Path(resolve_data_path(files[0]))


def memory_path(s: ReviseSettings, run_dir: Path) -> Path:
    from rlpost.rewards.rubric_memory import MEMORY_FILE

    return Path(s.memory).expanduser() if s.memory else run_dir / MEMORY_FILE


def check(s: ReviseSettings, overrides: list[str]) -> ReviseSettings:
    from rlpost.models.weights import is_run_dir
    from rlpost.rewards.rubric import parse_rubric
    from rlpost.rewards.rubric_memory import read_jsonl
    from rlpost.rewards.rubric_writer import build_writer

    if not s.run:
        raise ConfigError("run is required: rlpost revise-rubrics run=<run directory>.")
    run_dir = Path(s.run).expanduser()
    if not is_run_dir(run_dir):
        raise ConfigError(f"run={s.run!r} is not an rlpost run directory (no config.yaml and checkpoints/).")
    if s.failing >= s.saturated:
        raise ConfigError(f"failing={s.failing} must be below saturated={s.saturated}.")
    path = run_rubric(s, run_dir, read_jsonl(memory_path(s, run_dir)))
    try:
        parse_rubric(str(path))
    except ValueError as err:
        raise ConfigError(f"rubric: {err}") from None
    build_writer(s.writer)  # its errors name writer.<key>
    if s.retrieval == "semantic":
        from rlpost.rewards.embeddings import minilm_folder

        minilm_folder()  # the embedder's wheel (its error names the install, or retrieval=lexical)
    return s


def run(s: ReviseSettings, output_dir: str, overrides: list[str]) -> int:
    import yaml

    from rlpost.rewards.rubric import parse_rubric
    from rlpost.rewards.rubric_memory import (
        Decision,
        Embed,
        RevisionSettings,
        decide,
        ingest,
        parse_criterion,
        read_jsonl,
        writer_prompt,
    )
    from rlpost.rewards.rubric_writer import build_writer
    from rlpost.runs.rundir import write_atomic

    run_dir = Path(s.run or "").expanduser()
    mem_file = memory_path(s, run_dir)
    memory = read_jsonl(mem_file)
    rubric_path = run_rubric(s, run_dir, memory)
    criteria = parse_rubric(str(rubric_path))
    memory += ingest(run_dir, memory, [c.name for c in criteria])
    rs = RevisionSettings(s.window, s.saturated, s.failing, s.cooldown, s.evidence, s.max_chars, s.retrieval, s.related)
    decisions = [decide(memory, c, rs) for c in criteria]
    asks = [i for i, d in enumerate(decisions) if d.action in ("raise", "clarify")]
    embed: Embed | None = None
    if asks and s.retrieval == "semantic":
        from rlpost.rewards.embeddings import embed as minilm

        embed = minilm
    if asks:
        prompts = [writer_prompt(memory, criteria[i], decisions[i], rs, embed) for i in asks]
        replies = build_writer(s.writer).write(prompts)
        for i, reply in zip(asks, replies):
            text = parse_criterion(reply, criteria[i].text, s.max_chars)
            d = decisions[i]
            decisions[i] = (
                Decision(d.criterion, d.action, d.reason, d.mean, text)
                if text
                else Decision(d.criterion, "keep", f"{d.reason}; the writer gave no usable criterion", d.mean)
            )
    latest = max((r["step"] for r in memory if r["kind"] == "step_summary"), default=0)
    version = 1 + sum(r["kind"] == "revision" for r in memory)
    changed = [(c, d) for c, d in zip(criteria, decisions) if d.action != "keep" and d.new_text]
    out = None
    if changed:
        new_texts = {c.name: d.new_text for c, d in changed}
        rubric = {
            "criteria": [{"name": c.name, "text": new_texts.get(c.name, c.text), "weight": c.weight} for c in criteria]
        }
        out = Path(s.out) if s.out else run_dir / "rubrics" / f"rubric_v{version}.yaml"
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, f"# AMARIS revision {version} of {rubric_path} at step {latest}\n" + yaml.safe_dump(rubric))
        for c, d in changed:
            memory.append(
                {"kind": "edit", "version": version, "step": latest, "criterion": c.name, "action": d.action,
                 "old": c.text, "new": d.new_text, "before": d.mean}
            )  # fmt: skip
        memory.append({"kind": "revision", "version": version, "step": latest, "path": str(out)})
    write_atomic(mem_file, "".join(json.dumps(r) + "\n" for r in memory))
    for c, d in zip(criteria, decisions):
        mean = "-" if d.mean is None else f"{d.mean:.2f}"
        print(
            f"{c.name:<20} {d.action:<8} mean {mean:<5} {d.reason}"
            + (f"\n{'':<20} -> {d.new_text}" if d.new_text else "")
        )
    print(f"memory: {mem_file}" + (f"; revised rubric: {out}" if out else "; no criterion changed"))
    return 0


APP = tool("revise-rubrics", "revise_rubrics", ReviseSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
