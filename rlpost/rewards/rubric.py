"""rubric: weighted criteria, each judged by the judge layer (rlpost/judges/); the reward is their
weighted mean (METHODS.md section 3; seeds 000 #6, 004 #4, 004 #11, 004 #17, 000 #24)::

    r_i = sum_{j judged} w_j s_ij / sum_{j judged} w_j        s_ij in [0, 1]: the judge's score

over the criteria j whose judge call did not fail (``on_failure=skip`` leaves a criterion out;
``None`` when every criterion failed, so the sample does not count).

A rubric is YAML or JSON, from a file (``rubric``) or per item from a data column
(``rubric_column``: the column holds a path to such a file, or the rubric text itself). Forms:

- rlpost: ``{criteria: [{name, text, weight: 1.0}, ...]}`` or the bare list; ``text`` states the
  good behaviour ("The final answer equals the reference answer"), so a judge's "Yes" means good.
- WritingBench checklist: ``[{name, criteria_description, "1-2": ..., "3-4": ..., ...}]`` (their
  data stores it as a Python literal string; it is read with ``ast.literal_eval``); each item has
  weight 1 (WritingBench averages its criteria) and its score bands go into ``scale`` prompts.

Choices where the seeds are silent: one judge prompt per (completion, criterion), so criteria
cannot bias one another and the cache hits per criterion; the judge sees the prompt's last user
message, the completion with its reasoning trace stripped (``strip_think``), or with ``answer_tag`` only
the content of its last ``<answer_tag>...</answer_tag>`` block (a completion without one scores 0 on
every criterion, no judge call: IAP's tag schema, seed 004 #26), truncated to
``max_response_chars``, and, when ``reference_column`` is set, the gold answer labelled as the
reference (the rubric may then ask for agreement with it). Judge counters are logged per batch as
``rubric/judge_calls``, ``rubric/judge_failures`` and ``rubric/judge_cache_hits``, and each
criterion's batch mean as ``rubric/<name>`` (criteria of per-item rubrics are not logged by name).

Tiers (``tiers``, for ODRPO's ordinal thresholds, seed 004 #25): null keeps the score in [0, 1]; an integer
T maps it to the integer tier ``1 + floor((T - 1) s + 1/2)`` in {1, ..., T} (each column's score with
``columns=criteria``). With the judge in ``scale`` mode (a 1-10 reply s' gives s = (s' - 1) / 9) and
``tiers: 10``, a one-criterion rubric returns the judge's own integer s'; several criteria give the tier of
their weighted mean. The term declares its score range, ``[0, 1]`` or ``[1, T]``, which ODRPO checks
its thresholds against before any model loads.

Columns (``columns``): ``mean`` gives the one weighted-mean column above. ``criteria`` gives one reward
column per criterion (rlpost/scoring/columns.py), so that a combiner sees them apart: Focal Reward
(``reward/combine=focal``, seed 004 #4) re-weights criteria by their saturation, ``decoupled`` can
name criteria as style terms. Each column holds ``s_ij`` (NaN where row i's rubric has no criterion j or
its judge call failed) and has weight ``w_j / sum_k w_k`` times the term's weight, so the weighted sum
of the columns equals the weighted mean whenever every criterion was judged (a failed or missing one
is skipped without renormalizing). A rubric file names its own columns (unique names required). For
per-row rubrics (``rubric_column``) the columns are declared up front, ``criteria: {name: weight}``,
since TRL's reward matrix has a fixed width; a row whose rubric names a criterion outside that list,
or gives it another weight, is an error for that row (the failure policy applies).

Revision during training (``revise.enabled``, AMARIS, seed 004 #17; rubric_revision.py): every ``revise.every``
steps the criteria are revised from the run's evaluation memory on a background thread, and the revised rubric
(same names and weights) is swapped in whole at the next step boundary; with ``rubric_column`` each row's
rubric is revised from its own history. Held-out scoring uses the rubric in force. The memory, the revised
rubrics and a revision in flight travel with every checkpoint.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import yaml

from rlpost.core.chat import completion_text, prompt_text, strip_think
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range
from rlpost.judges.base import ANSWER_FORMAT, build_judge
from rlpost.rewards.base import REWARDS, ParamError, Reward, column, tag_content
from rlpost.rewards.rubric_memory import instance_id
from rlpost.rewards.rubric_revision import build_reviser

DEFAULT_TEMPLATE = (
    "You are grading a response to a task against one criterion.\n\n"
    "Task: {question}\n\n{reference}Response: {response}\n\n"
    "Criterion: {criterion}\n\nDoes the response meet the criterion? {answer_format}"
)
BAND_KEYS = ("1-2", "3-4", "5-6", "7-8", "9-10")


@dataclass(frozen=True)
class Criterion:
    name: str
    text: str
    weight: Annotated[float, Range(ge=0)] = 1.0
    bands: tuple[tuple[str, str], ...] = ()  # WritingBench score bands, shown in scale prompts


def parse_rubric(source: Any, where: str = "rubric") -> list[Criterion]:
    """A rubric (file path, YAML/JSON/Python-literal text, dict or list) -> criteria [J]."""
    if isinstance(source, str):
        from rlpost.core.schema import resolve_data_path

        path = resolve_data_path(source)
        if source.strip().endswith((".yaml", ".yml", ".json")) or os.path.isfile(path):
            if not os.path.isfile(path):
                raise ValueError(f"{where}: no such rubric file {source!r}")
            with open(path, encoding="utf-8") as handle:
                source = handle.read()
        source = _load_text(source, where)
    if isinstance(source, dict):
        source = source.get("criteria", source.get("checklist"))
    if not isinstance(source, list) or not source:
        raise ValueError(f"{where}: a rubric needs a non-empty list of criteria (or {{criteria: [...]}})")
    return [_criterion(item, f"{where} criterion {j}") for j, item in enumerate(source)]


def _load_text(text: str, where: str) -> Any:
    try:
        return yaml.safe_load(text)  # YAML is a superset of JSON
    except yaml.YAMLError:
        pass
    try:
        return ast.literal_eval(text)  # WritingBench stores checklists as Python literals
    except (ValueError, SyntaxError):
        raise ValueError(f"{where}: not YAML, JSON or a Python literal: {text[:60]!r}") from None


def _criterion(item: Any, where: str) -> Criterion:
    if isinstance(item, str):
        return Criterion(name=item[:40], text=item)
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a mapping or a string, got {item!r}")
    text = item.get("text") or item.get("criteria_description") or item.get("question")
    if not text:
        raise ValueError(f"{where}: needs `text` (or WritingBench's `criteria_description`)")
    if "criteria_description" in item and item.get("name"):
        text = f"{item['name']}: {text}"
    weight = float(item.get("weight", 1.0))
    if weight < 0:
        raise ValueError(f"{where}: weight must be >= 0, got {weight}")
    bands = tuple((k, str(item[k])) for k in BAND_KEYS if k in item)
    return Criterion(name=str(item.get("name") or text[:40]), text=str(text), weight=weight, bands=bands)


@REWARDS.register("rubric")
class Rubric(Reward):
    """Weighted mean of per-criterion judge scores from a rubric file or a per-item rubric column."""

    seed = "seed 000 #6, 004 #4, 004 #11, 004 #17"
    stateful = True  # with revise.enabled: the evaluation memory and the revised rubrics travel with checkpoints

    @dataclass(frozen=True)
    class Config:
        rubric: str | None = "recipes/data/rubrics/arithmetic.yaml"  # rubric file (YAML/JSON)
        rubric_column: str | None = None  # data column with a per-item rubric (path or text); overrides `rubric`
        judge: dict[str, Any] = field(default_factory=lambda: {"backend": "local"})  # judge backend and its Config
        reference_column: str | None = "answer"  # gold column shown to the judge as the reference (null: none)
        template: str = DEFAULT_TEMPLATE  # judge prompt; {question} {reference} {response} {criterion} {answer_format}
        strip_think: bool = True  # judge only the text after </think>
        answer_tag: str | None = None  # judge only the last <answer_tag>...</answer_tag> block; none: every criterion 0
        max_response_chars: Annotated[int, Range(ge=1)] = 2000  # longer responses are cut to this many characters
        columns: Literal["mean", "criteria"] = "mean"  # one weighted-mean column, or one column per criterion
        # columns=criteria with per-row rubrics: the criterion names the rows use, each with its weight
        criteria: dict[str, Annotated[float, Range(ge=0)]] | None = None
        tiers: Annotated[int | None, Range(ge=2)] = None  # null: scores in [0, 1]; T: integer tiers 1..T (ODRPO)
        revise: dict[str, Any] = field(default_factory=dict)  # AMARIS in-loop revision (rubric_revision.ReviseConfig)

    def __init__(self, cfg: Config):
        super().__init__(cfg)
        if cfg.rubric is None and cfg.rubric_column is None:
            raise ParamError("rubric", "set a rubric file, or rubric_column for per-item rubrics")
        try:
            self.default = parse_rubric(cfg.rubric) if cfg.rubric else None
        except ValueError as err:
            raise ParamError("rubric", str(err)) from None
        if cfg.answer_tag is not None and not re.fullmatch(r"[\w.:-]+", cfg.answer_tag):
            raise ParamError("answer_tag", f"{cfg.answer_tag!r} is not a plain tag name (letters, digits, _ . : -)")
        for key in ("question", "response", "criterion", "answer_format"):
            if "{" + key + "}" not in cfg.template:
                raise ParamError("template", f"must contain {{{key}}}")
        try:
            self.judge = build_judge(cfg.judge, "")
        except ConfigError as err:  # name the key: reward.terms[i].params.judge: ...
            raise ParamError("judge", str(err).lstrip(": ")) from None
        self._parsed: dict[str, list[Criterion]] = {}
        self._instances: dict[str, str] = {}  # a row rubric's text -> its instance id (rubric_memory.instance_id)
        self._columns = self._criterion_columns() if cfg.columns == "criteria" else None
        self.reviser = build_reviser(cfg.revise)
        if self.reviser is not None and self._columns is not None:
            raise ParamError("revise", "enabled with columns=criteria is not built (the split columns would each save "
                             "the memory); use columns=mean")  # fmt: skip
        self._calls = 0  # training calls without a trainer_state (the step counter then)

    def check_run(self, run: Any) -> None:
        """With ``revise.enabled``: one process (each rank would keep its own memory and revise its own rubric), and
        a local writer's weights exist."""
        if self.reviser is None:
            return
        from rlpost.models.loading import check_weights_available
        from rlpost.rewards.rubric_writer import build_writer

        writer = build_writer(self.reviser.cfg.writer)  # validated in __init__
        if writer.cfg.backend == "local":
            check_weights_available(writer.cfg.model, f"reward term {self.__name__}: params.revise.writer.model")
        if run.hardware.num_processes > 1:
            raise ConfigError(
                f"reward term {self.__name__}: params.revise.enabled=true keeps the evaluation memory in one process; "
                f"with hardware.num_processes={run.hardware.num_processes} each rank would revise its own rubric. "
                "Run on one process, or revise between segments (rlpost revise-rubrics run=<dir>)."
            )

    def state_dict(self) -> dict[str, Any]:
        return {} if self.reviser is None else self.reviser.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if self.reviser is not None and state:
            make = lambda c: Criterion(c["name"], c["text"], c["weight"], tuple(tuple(b) for b in c["bands"]))  # noqa: E731
            self.reviser.load_state_dict(state, make)

    def _criterion_columns(self) -> list[tuple[str, float]]:
        """``columns=criteria``: (name, weight) per column, from the rubric file or ``criteria``."""
        if self.cfg.rubric_column:
            if not self.cfg.criteria:
                raise ParamError(
                    "criteria",
                    "columns=criteria with per-row rubrics (rubric_column) needs the criterion names the rows "
                    "use, each with its weight: criteria={name: weight, ...}",
                )
            return list(self.cfg.criteria.items())
        if self.cfg.criteria:
            raise ParamError("criteria", "is for per-row rubrics (rubric_column); the rubric file names its criteria")
        assert self.default is not None  # __init__: a rubric file or a rubric column
        names = [c.name for c in self.default]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ParamError("rubric", f"columns=criteria needs unique criterion names; repeated: {repeated}")
        return [(c.name, c.weight) for c in self.default]

    def output_columns(self) -> list[tuple[str, float]] | None:
        return self._columns

    def score_range(self) -> tuple[float, float]:
        return (0.0, 1.0) if self.cfg.tiers is None else (1.0, float(self.cfg.tiers))

    def tier(self, score: float | None) -> float | None:
        """A score in [0, 1] -> itself, or with ``tiers: T`` the integer tier 1 + floor((T - 1) s + 1/2)."""
        if score is None or self.cfg.tiers is None:
            return score
        return float(1 + math.floor((self.cfg.tiers - 1) * score + 0.5))

    def rubric_for(self, value: Any) -> list[Criterion]:
        return self._rubric_and_instance(value)[0]

    def _rubric_and_instance(self, value: Any) -> tuple[list[Criterion], str | None]:
        """A row's rubric column value -> the rubric in force for it and its instance id (None: the global rubric)."""
        if value is None or value == "":
            if self.default is None:
                raise ValueError(f"reward 'rubric': row has no rubric in column {self.cfg.rubric_column!r}")
            base, instance = self.default, None
        else:
            key = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            if key not in self._parsed:
                self._parsed[key] = parse_rubric(value, f"column {self.cfg.rubric_column!r}")
                self._instances[key] = instance_id(key)
            base, instance = self._parsed[key], self._instances[key]
        return (base if self.reviser is None else self.reviser.current(instance, base)), instance

    def judge_prompt(self, question: str, response: str, criterion: Criterion, reference: Any) -> str:
        text = criterion.text
        if self.judge.mode == "scale" and criterion.bands:
            text += "".join(f"\n  score {k}: {v}" for k, v in criterion.bands)
        ref = f"Reference answer (known to be correct): {reference}\n\n" if reference is not None else ""
        response = response[: self.cfg.max_response_chars]
        return self.cfg.template.format(
            question=question,
            reference=ref,
            response=response,
            criterion=text,
            answer_format=ANSWER_FORMAT[self.judge.mode],
        )

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """``completions [N]`` -> weighted mean judge score ``[N]`` in [0, 1], or its tier in {1..T} with ``tiers``
        (None: no criterion judged)."""
        means: list[float | None] = []
        for judged in self._judge_rows(prompts, completions, kwargs):
            pairs = [(c.weight, s) for c, s in judged if s is not None]
            weight = sum(w for w, _ in pairs)
            means.append(self.tier(sum(w * s for w, s in pairs) / weight) if weight > 0 else None)
        return means

    def column_scores(self, prompts: list, completions: list, **kwargs: Any) -> list[list[float | None]]:
        """``columns=criteria``: ``[N][C]`` judge scores, column c = criterion ``output_columns()[c]``."""
        assert self._columns is not None
        index = {name: (c, weight) for c, (name, weight) in enumerate(self._columns)}
        table: list[list[float | None]] = []
        for i, judged in enumerate(self._judge_rows(prompts, completions, kwargs)):
            row: list[float | None] = [None] * len(self._columns)
            for criterion, s in judged:
                if criterion.name not in index:
                    raise ValueError(
                        f"reward 'rubric': row {i}'s criterion {criterion.name!r} is not among the declared "
                        f"columns ({', '.join(index)}); add it to criteria"
                    )
                c, weight = index[criterion.name]
                if criterion.weight != weight:
                    raise ValueError(
                        f"reward 'rubric': row {i} gives criterion {criterion.name!r} weight {criterion.weight}, "
                        f"but its column has weight {weight} (criteria)"
                    )
                row[c] = self.tier(s)
            table.append(row)
        return table

    def _judge_rows(self, prompts: list, completions: list, kwargs: dict) -> list[list[tuple[Criterion, float | None]]]:
        """One judge call per (completion, criterion) -> per row, its criteria with their scores (None: failed)."""
        n, cfg = len(completions), self.cfg
        revising = self.reviser is not None and self.learning
        if revising:  # the step boundary: a finished revision is swapped in before any row is judged
            assert self.reviser is not None
            self.reviser.run_dir = self.run_dir
            self.reviser.boundary(self._step(kwargs))
        rubrics = column(kwargs, cfg.rubric_column, n, "rubric") if cfg.rubric_column else [None] * n
        refs = column(kwargs, cfg.reference_column, n, "rubric") if cfg.reference_column else [None] * n
        jobs: list[tuple[int, Criterion]] = []
        judge_prompts: list[str] = []
        unanswered: list[int] = []  # answer_tag set and no such block: nothing to judge, every criterion 0
        judged_text: list[str] = []  # [N] the text the judge saw (the memory's rollouts)
        row_rubrics = [self._rubric_and_instance(r) for r in rubrics]  # [N] one read per row: the step's rubric
        for i, completion in enumerate(completions):
            response = completion_text(completion)
            response = strip_think(response) if cfg.strip_think else response
            judged_text.append(response)
            if cfg.answer_tag is not None:
                answer = tag_content(response, cfg.answer_tag)
                if answer is None:
                    unanswered.append(i)
                    continue
                response = answer
            for criterion in row_rubrics[i][0]:
                jobs.append((i, criterion))
                judge_prompts.append(self.judge_prompt(prompt_text(prompts[i]), response, criterion, refs[i]))
        before = dict(self.judge.stats)
        scores = self.judge.score(judge_prompts)
        rows: list[list[tuple[Criterion, float | None]]] = [[] for _ in range(n)]
        by_name: dict[str, list[float]] = {}
        for (i, criterion), s in zip(jobs, scores):
            rows[i].append((criterion, s))
            if s is not None:
                by_name.setdefault(criterion.name, []).append(s)
        for i in unanswered:
            rows[i] = [(criterion, 0.0) for criterion in row_rubrics[i][0]]
            for criterion, _ in rows[i]:
                by_name.setdefault(criterion.name, []).append(0.0)
        self._log(kwargs, before, by_name)
        if revising:
            self._remember(prompts, judged_text, rows, [inst for _, inst in row_rubrics], kwargs)
        return rows

    def _step(self, kwargs: dict) -> int:
        """The training step being scored: TRL's ``global_step + 1`` (else this term's count of training calls)."""
        state = kwargs.get("trainer_state")
        if state is not None:
            return int(state.global_step) + 1
        self._calls += 1
        return self._calls

    def _remember(self, prompts: list, texts: list[str], rows: list, instances: list[str | None], kwargs: dict) -> None:
        """The judged rows [N] into the reviser's memory, and its amaris/* figures into the step's metrics."""
        assert self.reviser is not None
        records = []
        for prompt, text, judged, instance in zip(prompts, texts, rows, instances):
            pairs = [(c.weight, s) for c, s in judged if s is not None]
            weight = sum(w for w, _ in pairs)
            records.append({
                "instance": instance, "question": prompt_text(prompt), "response": text,
                "reward": sum(w * s for w, s in pairs) / weight if weight > 0 else None,
                "scores": {c.name: s for c, s in judged if s is not None},
            })  # fmt: skip
        self.reviser.record(records)
        log = kwargs.get("log_metric")
        if callable(log):
            for name, value in self.reviser.last.items():
                log(name, value)

    def _log(self, kwargs: dict, before: dict[str, int], by_name: dict[str, list[float]]) -> None:
        log = kwargs.get("log_metric")
        if not callable(log):
            return
        for key in ("calls", "failures", "cache_hits"):
            log(f"rubric/judge_{key}", float(self.judge.stats[key] - before[key]))
        if self.default is not None and not self.cfg.rubric_column:
            for name, values in by_name.items():
                log(f"rubric/{name}", sum(values) / len(values))
