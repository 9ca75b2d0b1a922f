"""dynamic_rubric: DynamicRubric (seed 000 #24), rubric items written per candidate set.

"As policies improve, these sampled responses become close in quality [...] collapsed relative
evaluator score gaps yield weak or misleading policy supervision. [...] DynamicRubric, a
response-set-conditioned evaluator [...] generates weighted binary rubric items for each candidate
set and aggregates the resulting judgments into response-level scores" (seed 000 #24). Per group:

1. The writer (rubric_writer.py; local SmolLM2 by default) sees the question and the G candidates
   and writes up to ``max_items`` yes/no checks that tell them apart, one per line as
   ``weight | check`` (weight 1-3); a list entry (``-``, ``1.``) without a weight has weight 1,
   and a line that is neither is prose, not an item.
2. The judge layer scores every (candidate, item) as a yes/no question: s_ik in [0, 1].
3. ``r_i = sum_k w_k s_ik / sum_{k judged} w_k`` (the rubric reward's weighted mean, per group).

Choices where the abstract is silent: the items are generated fresh for every group (no cache
across steps: the candidates differ); candidates are shown to the writer stripped of ``<think>``
traces and cut to ``max_candidate_chars``; when the writer fails or nothing parses, the group uses
``default_items`` (logged as ``writer_fallback``); items are deduplicated and cut to ``max_items``;
the co-evolution of the evaluator (training the writer) is out of scope: the writer is frozen.
Measured here: SmolLM2-135M-Instruct, the default writer, does not follow the item format (it
answers the task instead), so every group falls back to ``default_items``; use a larger writer
(an endpoint, or a local model such as Qwen2.5-0.5B via ``writer.model``) for real dynamic items.
A candidate with no judged item gets ``None``. Logged: ``items``, ``writer_fallback``, judge counters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.errors import ConfigError
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rewards.base import REWARDS, ParamError, answer_text
from rlpost.rewards.group import GroupReward
from rlpost.rewards.rubric import prompt_text
from rlpost.rewards.rubric_writer import build_writer
from rlpost.schema import Range

WRITER_TEMPLATE = (
    "Task: {question}\n\n{candidates}\n\nWrite {max_items} short yes/no checks that a good response to the "
    "task passes and that tell these {count} responses apart. Write one check per line in the form "
    "`weight | check`, weight 1, 2 or 3. Example:\n3 | The response gives the correct final answer\n"
    "1 | The response is one sentence long"
)
JUDGE_TEMPLATE = (
    "Task: {question}\n\nResponse: {response}\n\nCheck: {item}\n\nDoes the response pass the check? {answer_format}"
)
_LINE = re.compile(r"^\s*([-*\u2022]|\d+[.)])?\s*(?:\[?\(?(\d+(?:\.\d+)?)\)?\]?\s*[|:]\s*)?(.*\S)\s*$")


def parse_items(text: str | None, max_items: int) -> list[tuple[float, str]]:
    """Writer output -> [(weight, check)] (deduplicated, at most ``max_items``; weights > 0)."""
    items: list[tuple[float, str]] = []
    seen: set[str] = set()
    for line in (text or "").splitlines():
        found = _LINE.match(line)
        if not found or not (found.group(1) or found.group(2)):
            continue  # an item is a list entry or a `weight | check` line, not free prose
        weight = float(found.group(2)) if found.group(2) else 1.0
        check = found.group(3).strip().strip('"')
        if len(check) < 8 or weight <= 0 or check.lower() in seen or check.endswith(":"):
            continue  # headers ("Checks:"), fragments and repeats are not items
        seen.add(check.lower())
        items.append((weight, check))
        if len(items) == max_items:
            break
    return items


@REWARDS.register("dynamic_rubric")
class DynamicRubric(GroupReward):
    """Weighted yes/no rubric items written for each group of candidates, judged per candidate."""

    @dataclass(frozen=True)
    class Config:
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # rubric writer (rubric_writer.py)
        max_items: Annotated[int, Range(ge=1)] = 4  # rubric items per group at most
        default_items: list[str] = field(
            default_factory=lambda: ["The response answers the task correctly", "The response is clear and concise"]
        )  # checks used when the writer gives nothing usable
        writer_template: str = WRITER_TEMPLATE  # {count} {question} {candidates} {max_items}
        judge_template: str = JUDGE_TEMPLATE  # {question} {response} {item} {answer_format}
        strip_think: bool = True  # show and judge only the text after </think>
        max_candidate_chars: Annotated[int, Range(ge=1)] = 600  # each candidate is cut to this many characters

    def __init__(self, cfg: Config):
        if cfg.max_items < 1 or not cfg.default_items:
            raise ParamError("max_items", "max_items must be >= 1 and default_items non-empty")
        for key, template, names in (
            ("writer_template", cfg.writer_template, ("question", "candidates")),
            ("judge_template", cfg.judge_template, ("question", "response", "item", "answer_format")),
        ):
            for name in names:
                if "{" + name + "}" not in template:
                    raise ParamError(key, f"must contain {{{name}}}")
        try:
            self.judge = build_judge(cfg.judge, "")
        except ConfigError as err:
            raise ParamError("judge", str(err).lstrip(": ")) from None
        try:
            self.writer = build_writer(cfg.writer)
        except ConfigError as err:
            raise ParamError("writer", str(err).lstrip(": ")) from None
        super().__init__(cfg)

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> weighted item pass rates ``[G]`` in [0, 1] (None: nothing judged)."""
        cfg, question = self.cfg, prompt_text(prompts[0])
        texts = [answer_text(c, cfg.strip_think)[: cfg.max_candidate_chars] for c in completions]
        candidates = "\n\n".join(f"Response {k + 1}: {t}" for k, t in enumerate(texts))
        request = cfg.writer_template.format(
            count=len(texts), question=question, candidates=candidates, max_items=cfg.max_items
        )
        items = parse_items(self.writer.write([request])[0], cfg.max_items)
        fallback = not items
        if fallback:
            items = [(1.0, check) for check in cfg.default_items]
        before = dict(self.judge.stats)
        judge_prompts = [
            cfg.judge_template.format(
                question=question, response=t, item=check, answer_format=ANSWER_FORMAT[self.judge.mode]
            )
            for t in texts
            for _, check in items
        ]
        scores = self.judge.score(judge_prompts)
        k = len(items)
        rewards: list[float | None] = []
        for i in range(len(texts)):
            judged = [(w, s) for (w, _), s in zip(items, scores[i * k : (i + 1) * k]) if s is not None]
            total = sum(w for w, _ in judged)
            rewards.append(sum(w * s for w, s in judged) / total if total > 0 else None)
        metrics = {"items": float(k), "writer_fallback": float(fallback)}
        metrics.update({f"judge_{key}": float(self.judge.stats[key] - before[key]) for key in before})
        return rewards, metrics
