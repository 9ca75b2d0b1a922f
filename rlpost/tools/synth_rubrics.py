"""``rlpost synth-rubrics``: rubric-annotated RL data from documents (ARES, seed 004 #11; rlpost/data/synth_rubrics.py).

    rlpost synth-rubrics                                              # the bundled documents, local SmolLM2
    rlpost synth-rubrics documents=my_docs/ writer.model.source=qwen2_5_coder per_document=3 out=data.jsonl
    rlpost train data=jsonl data.path=data.jsonl reward=rubric reward.terms.0.params.rubric=null \\
        reward.terms.0.params.rubric_column=rubric                    # train on it

Writes the kept rows to ``out`` (jsonl), the rejected ones with their reason to ``<out stem>.rejected.jsonl``,
and prints how many each validity filter removed.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from rlpost.app import launch, tool
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.data.synth_rubrics import DEFAULT_PERSONAS, Filters


@dataclass(frozen=True)
class SynthSettings:
    documents: str = "recipes/data/ares_documents.jsonl"  # a jsonl of {id, domain, text} or a folder of .txt
    personas: list[str] = field(default_factory=lambda: list(DEFAULT_PERSONAS))  # who asks, cycled
    per_document: Annotated[int, Range(ge=1)] = 1  # instances per document, each with the next persona
    criteria: Annotated[int, Range(ge=1)] = 3  # criteria asked for per question
    writer: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 320})  # rubric_writer.WriterConfig
    filters: Filters = field(default_factory=Filters)
    batch_size: Annotated[int, Range(ge=1)] = 4  # prompts per writer call
    out: str | None = None  # the kept rows (null: <hydra run dir>/rubric_data.jsonl)
    progress: bool = True  # a progress bar over the documents


def documents_path(s: SynthSettings) -> Path:
    from rlpost.data.sources import RESOURCES

    path = Path(s.documents).expanduser()
    return path if path.is_absolute() or path.exists() else RESOURCES / path


def check(s: SynthSettings, overrides: list[str]) -> SynthSettings:
    from rlpost.data.synth_rubrics import load_documents
    from rlpost.rewards.rubric_writer import build_writer

    load_documents(documents_path(s))
    if not s.personas or any(not str(p).strip() for p in s.personas):
        raise ConfigError("personas is empty or has an empty entry: give who asks, e.g. personas=['a busy parent'].")
    if s.filters.min_criteria > s.filters.max_criteria:
        raise ConfigError(
            f"filters.min_criteria={s.filters.min_criteria} is above filters.max_criteria={s.filters.max_criteria}."
        )
    build_writer(s.writer)  # its errors name writer.<key>
    return s


def run(s: SynthSettings, output_dir: str, overrides: list[str]) -> int:
    from tqdm.auto import tqdm

    from rlpost.data.synth_rubrics import load_documents, parse, prompt, rejection, row
    from rlpost.rewards.rubric_writer import build_writer
    from rlpost.runs.rundir import write_atomic

    docs = load_documents(documents_path(s))
    writer = build_writer(s.writer)
    filters = s.filters
    jobs = [
        (doc, s.personas[(i * s.per_document + k) % len(s.personas)])
        for i, doc in enumerate(docs)
        for k in range(s.per_document)
    ]
    kept: list[dict] = []
    rejected: list[dict] = []
    seen: set[str] = set()
    for start in tqdm(range(0, len(jobs), s.batch_size), desc="synth-rubrics", disable=not s.progress):
        batch = jobs[start : start + s.batch_size]
        replies = writer.write([prompt(doc, persona, s.criteria) for doc, persona in batch], prefix="Question:")
        for (doc, persona), reply in zip(batch, replies):
            instance = parse(reply) if reply is not None else None
            reason = "unparsable" if instance is None else rejection(instance, doc, filters)
            if instance is not None and reason is None and instance.question.lower() in seen:
                reason = "duplicate"
            if reason is None and instance is not None:
                seen.add(instance.question.lower())
                kept.append(row(instance, doc, persona))
            else:
                rejected.append({"source": doc.id, "persona": persona, "reason": reason, "reply": reply})
    out = Path(s.out) if s.out else Path(output_dir) / "rubric_data.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(out, "".join(json.dumps(r) + "\n" for r in kept))
    rejected_path = out.with_name(out.stem + ".rejected.jsonl")
    write_atomic(rejected_path, "".join(json.dumps(r) + "\n" for r in rejected))
    counts = Counter(r["reason"] for r in rejected)
    print(f"{len(jobs)} instances asked of {len(docs)} documents: {len(kept)} kept")
    for reason in ("unparsable", "self_containment", "faithfulness", "rubric_validity", "duplicate"):
        print(f"  rejected ({reason}): {counts.get(reason, 0)}")
    print(f"rows: {out}; rejected: {rejected_path}")
    return 0


APP = tool("synth-rubrics", "synth_rubrics", SynthSettings, check, run)


def main(args: list[str]) -> int:
    return launch(APP, args)
