"""ARES (seed 004 #11): rubric-annotated RL data synthesized from documents (``rlpost synth-rubrics``).

For each document and each of ``per_document`` personas (cycled through ``personas``), a writer model
(rlpost/rewards/rubric_writer.py: a local model or an OpenAI-compatible endpoint) is asked, conditioned
on the document's domain and the persona, for one self-contained question, its answer, and a
question-specific weighted rubric, in a line format::

    Question: <a question the persona would ask, answerable without the document>
    Answer: <the answer, from the document>
    Criteria:
    - [3] <what a good answer must do>
    - [1] ...

Each instance then passes three validity filters, or is rejected with its reason:

- self-containment: the question ends with ``?``, has ``min_question_words`` words or more, and does not
  point at the source (``the document``, ``the text``, ``the passage``, ``according to``, ``above``, ...);
- answer faithfulness: at least ``min_support`` of the answer's content words (4+ letters, not stop
  words) occur in the document;
- rubric validity: ``min_criteria`` .. ``max_criteria`` criteria, weights integers in 1..3, distinct
  texts, none a copy of the question, none pointing at the source (the judge never sees the document).

Kept instances are rows ``{question, answer, rubric, domain, persona, source}`` where ``rubric`` is the
rlpost rubric as JSON (``[{name, text, weight}]``): what ``reward=rubric`` reads with
``rubric_column: rubric`` and ``reference_column: answer`` (``data=jsonl``, ``data.path=<out>``).

Choices where the abstract is silent: the line format (small models follow it far more often than JSON),
the local writer's answer opened with ``Question:``; weights 1-3 (the rubric reward's own scale); the
filters are lexical, so they run offline in milliseconds (a judge-based faithfulness check is the
obvious upgrade); a repeated question is dropped. Bundled: ten short documents written for rlpost
across six domains (``recipes/data/ares_documents.jsonl``) and five personas.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from rlpost.core.errors import ConfigError
from rlpost.core.jsonl import json_objects
from rlpost.core.schema import Range

PROMPT = (
    "Domain: {domain}\nThe person asking: {persona}\n\nDocument:\n{text}\n\n"
    "Write one question this person would ask that the document answers. The question must make sense on its "
    "own, without the document. Then write its answer, using the document. Then write {n} criteria that a good "
    "answer to this question must meet, each with a weight from 1 (nice to have) to 3 (essential).\n"
    "Reply in exactly this format:\nQuestion: ...\nAnswer: ...\nCriteria:\n- [3] ...\n- [2] ...\n- [1] ..."
)
DEFAULT_PERSONAS = (
    "a curious high-school student",
    "a busy parent",
    "a retired engineer",
    "a university student preparing for an exam",
    "a small-business owner",
)
SOURCE_REFERENCES = re.compile(
    r"\b(the|this|that) (document|text|passage|article|paragraph|excerpt|source)\b|\baccording to\b|\babove\b|"
    r"\bmentioned\b",
    re.IGNORECASE,
)
STOP_WORDS = frozenset(
    "that this with from have will been were they them their there what when which while into than then "
    "also more most such only some about because these those your would could should very each other".split()
)


@dataclass(frozen=True)
class Document:
    id: str
    domain: str
    text: str


@dataclass(frozen=True)
class Instance:
    question: str
    answer: str
    criteria: tuple[tuple[int, str], ...]  # (weight, text)


@dataclass(frozen=True)
class Filters:
    """The validity filters' thresholds (``filters.*`` of ``rlpost synth-rubrics``)."""

    min_question_words: Annotated[int, Range(ge=1)] = 5  # shorter questions cannot stand alone
    min_support: Annotated[float, Range(ge=0, le=1)] = 0.6  # share of the answer's content words in the document
    min_criteria: Annotated[int, Range(ge=1)] = 2  # fewest rubric criteria
    max_criteria: Annotated[int, Range(ge=1)] = 5  # most rubric criteria


def load_documents(path: str | Path) -> list[Document]:
    """A jsonl of ``{id, domain, text}`` (``id`` defaults to the line number, ``domain`` to ``general``)
    or a folder of ``.txt`` files (one document each, domain ``general``)."""
    folder = Path(path)
    if folder.is_dir():
        docs = [
            Document(p.stem, "general", p.read_text(encoding="utf-8").strip()) for p in sorted(folder.glob("*.txt"))
        ]
    elif folder.is_file():
        docs = []
        for where, row in json_objects(str(folder), "document", ("text",)):
            if not str(row.get("text") or "").strip():
                raise ConfigError(f"{where}: needs a non-empty `text` field.")
            number = where.rsplit(" ", 1)[-1]
            docs.append(Document(str(row.get("id", number)), str(row.get("domain") or "general"), str(row["text"])))
    else:
        raise ConfigError(f"documents={str(path)!r}: no such file or folder (a jsonl or a folder of .txt files).")
    docs = [d for d in docs if d.text]
    if not docs:
        raise ConfigError(f"documents={str(path)!r} holds no document.")
    return docs


def prompt(doc: Document, persona: str, criteria: int) -> str:
    return PROMPT.format(domain=doc.domain, persona=persona, text=doc.text, n=criteria)


def parse(text: str) -> Instance | None:
    """The writer's reply -> an instance; None when a part is missing (no question, answer or criterion)."""
    question = re.search(r"^\s*Question:\s*(.+)$", text, re.MULTILINE)
    answer = re.search(r"^\s*Answer:\s*(.+?)\s*(?=^\s*Criteria:|\Z)", text, re.MULTILINE | re.DOTALL)
    criteria_at = re.search(r"^\s*Criteria:\s*$", text, re.MULTILINE)
    if not (question and answer and criteria_at):
        return None
    items = re.findall(r"^\s*[-*]\s*\[(\d+)\]\s*(.+?)\s*$", text[criteria_at.end() :], re.MULTILINE)
    if not items:
        return None
    criteria = tuple((int(w), t) for w, t in items)
    return Instance(question.group(1).strip(), " ".join(answer.group(1).split()), criteria)


def content_words(text: str) -> list[str]:
    return [w for w in re.findall(r"[a-z]{4,}", text.lower()) if w not in STOP_WORDS]


def rejection(instance: Instance, doc: Document, f: Filters) -> str | None:
    """Why ``instance`` fails a validity filter (None: it passes all three)."""
    q = instance.question
    if not q.endswith("?") or len(q.split()) < f.min_question_words:
        return "self_containment"  # not a question, or too short to stand alone
    if SOURCE_REFERENCES.search(q):
        return "self_containment"  # it points at a source the reader will not see
    words = content_words(instance.answer)
    source = set(content_words(doc.text))
    if not words or sum(w in source for w in words) / len(words) < f.min_support:
        return "faithfulness"
    texts = [t.lower() for _, t in instance.criteria]
    if not f.min_criteria <= len(instance.criteria) <= f.max_criteria:
        return "rubric_validity"
    if any(not 1 <= w <= 3 for w, _ in instance.criteria) or len(set(texts)) < len(texts) or q.lower() in texts:
        return "rubric_validity"
    if any(SOURCE_REFERENCES.search(t) for t in texts):
        return "rubric_validity"  # the judge grades the response without the document
    return None


def row(instance: Instance, doc: Document, persona: str) -> dict[str, Any]:
    """A kept instance as a data row; ``rubric`` is the rlpost rubric JSON that reward=rubric reads."""
    rubric = [
        {"name": f"c{j + 1}", "text": text, "weight": weight} for j, (weight, text) in enumerate(instance.criteria)
    ]
    return {
        "question": instance.question,
        "answer": instance.answer,
        "rubric": json.dumps(rubric),
        "domain": doc.domain,
        "persona": persona,
        "source": doc.id,
    }
