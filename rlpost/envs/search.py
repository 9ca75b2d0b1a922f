"""The search environment: questions answered from a document collection through a ``<search>`` tool (issue 18, env 2).

Episode: ``reset(row)`` gives the row's question after a system message that explains the tool. Each
assistant turn either searches (``<search>Orla Osterlin</search>``: each query is answered, in order, by
one ``role="tool"`` observation listing the ``top_k`` best documents by BM25, ``<docs>[1] ... [2] ...</docs>``)
or gives its final answer, which ends the episode with reward 1.0 when it contains the row's ``answer``
(case-insensitive, on word boundaries), else 0.0. The bundled task (``data=search_qa``,
rlpost/envs/search_data.py) needs one retrieval (a person's city or profession) or two (the person's
city, then that city's country).

BM25 is ``bm25s`` (a real BM25 library: Lucene's scoring, k1 = 1.5, b = 0.75, English stopwords
removed, no stemming). The index is built once per corpus file and process and shared by every episode.
Choices where the issue is silent: an empty query is an error observation; results show the document
text only (no ids or scores, which the policy cannot use); a turn with several queries gets one
observation per query.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from rlpost.core.schema import PathSpec, Range, resolve_data_path
from rlpost.envs.base import ENVS, Message, ToolConfig, ToolEnvironment, row_messages
from rlpost.envs.tags import error_tag
from rlpost.transforms.base import add_note

SYSTEM = (
    "You can search a document collection. Write <search>query</search> and you will get the best-matching "
    "documents. Search as often as you need. When you know the answer, reply with it and no <search> tag.\n"
    "Example. User: In which city was Ada Lund born? You: <search>Ada Lund</search> "
    "Search: <docs>[1] Ada Lund was a potter, born in Osk in 1901.</docs> You: Osk"
)
_INDEXES: dict[str, Any] = {}  # corpus path -> (retriever, texts): built once per process
_LOCK = threading.Lock()


@dataclass(frozen=True)
class SearchConfig(ToolConfig):
    """The episode limits, the corpus and how many documents a query returns."""

    corpus: Annotated[str, PathSpec("jsonl_file")] = "recipes/data/search_corpus.jsonl"  # jsonl of {"id", "text"}
    top_k: Annotated[int, Range(ge=1)] = 2  # documents per query
    tag: str = "search"  # the tool-call tag: <search>query</search>


def bm25_index(path: str) -> tuple[Any, list[str]]:
    """The BM25 index of a jsonl corpus (``{"text": ...}`` per line) and its texts, built once per process."""
    import bm25s

    key = str(Path(path).resolve())
    with _LOCK:
        if key not in _INDEXES:
            texts = [json.loads(line)["text"] for line in Path(key).read_text().splitlines() if line.strip()]
            retriever = bm25s.BM25(k1=1.5, b=0.75)
            retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
            _INDEXES[key] = (retriever, texts)
        return _INDEXES[key]


def search(path: str, query: str, k: int) -> list[str]:
    """The ``k`` best documents of the corpus for ``query``, best first."""
    import bm25s

    retriever, texts = bm25_index(path)
    tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
    if not tokens.vocab:  # only stopwords or punctuation: nothing to match
        return []
    found, scores = retriever.retrieve(tokens, k=min(k, len(texts)), show_progress=False)
    return [texts[int(i)] for i, s in zip(found[0], scores[0]) if s > 0]


def contains_answer(text: str, answer: str) -> bool:
    """Whether ``answer`` occurs in ``text`` as whole words, ignoring case."""
    return bool(answer.strip()) and re.search(rf"\b{re.escape(answer.strip())}\b", text, re.IGNORECASE) is not None


@ENVS.register("search")
class Search(ToolEnvironment):
    """Questions over a bundled corpus with a <search> tool (BM25, bm25s); reward 1.0 for a correct final answer."""

    verifiable = True  # the episode reward checks against the row's gold

    Config = SearchConfig
    cfg: SearchConfig
    ARGUMENT, TOOL, SYSTEM, TAG_IN_SYSTEM = "query", "Search the document collection.", SYSTEM, "search"
    ARGUMENT_DOC = "what to search for"

    def __init__(self, cfg: SearchConfig):
        super().__init__(cfg)
        self.answer = ""

    def reset(self, row: dict[str, Any], seed: int = 0) -> list[Message]:
        self.answer = str(row.get("answer", ""))
        return add_note(row_messages(row), self.instructions(), "system")

    def use_tool(self, argument: str) -> tuple[bool, str]:
        if not argument:
            return False, error_tag("empty query")
        docs = search(resolve_data_path(self.cfg.corpus), argument, self.cfg.top_k)
        if not docs:
            return False, error_tag(f"no document matches {argument!r}")
        return True, "<docs>" + " ".join(f"[{i + 1}] {doc}" for i, doc in enumerate(docs)) + "</docs>"

    def final_reward(self, message: str) -> float:
        return 1.0 if contains_answer(message, self.answer) else 0.0

    def describe(self) -> str:
        tag = self.cfg.tag
        return (
            f"search: the policy may write <{tag}>query</{tag}> and gets the {self.cfg.top_k} best documents by BM25 "
            "back as a tool message; a turn without a query is the final answer, rewarded 1.0 at the end if it "
            "contains the row's answer, else 0.0"
        )
