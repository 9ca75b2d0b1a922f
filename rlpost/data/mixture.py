"""``data=mixture``: several prompt sources in one run, each with its data, share of the batch, reward and environment.

    rlpost train data=mixture                      # conf/data/mixture.yaml: basic_arithmetic + chain_sum, 50/50
    rlpost train recipe=mixture_demo               # arithmetic (math_answer) + calculator episodes (reward=env)

``data.sources`` is a list; each entry (``SourceConfig``) names a data option of ``conf/data/`` with keys set on
it (``data_params``, nested mappings merged), its ``fraction`` of every generation batch's prompts (the fractions
sum to 1), its reward (a ``conf/reward/`` option, inline ``{terms: [...]}``, or null: the run's ``reward``), and
optionally its environment (``env``: a ``conf/data/env/`` option or an inline node) and transform. Its ``name``
(default: the data option) labels its metrics. The builder (rlpost/build.py) composes each option as ``data=`` /
``reward=`` would (``${seed}`` = the run's seed) and builds every source before any model loads.

What this module holds: the schema, the composition of each source's options, the per-batch allocation, the
sampler (stage 0 of the trainer: ``Mixture.sampler``), the ``Mixture`` component whose state (the generation
batches trained) is saved with every checkpoint, and the loading of every source's rows into one training set
whose ``rlpost_source`` column says where each row comes from.

Choices where the issue left room:
- **Counts per batch.** A generation batch of P prompts gives source s ``f_s * P`` prompts when that is a whole
  number (within 1e-6): then every batch holds exactly those counts. Otherwise s gets ``floor(f_s * P)`` and
  the ``P - sum floor`` remaining prompts go, one each, to the sources furthest behind their share of all
  prompts drawn so far (``f_s * P * (b + 1) - drawn_s``; ties: the source listed first), so over the run each
  source's count stays within one prompt of its share (tests/unit/data/test_mixture.py checks the bound).
- **Which rows.** Each source is drawn without replacement through a seeded permutation of its rows (run seed,
  source index, pass over the source), a fresh permutation per pass (arranged so that a batch spanning two passes
  holds no row twice, while the source has at least twice the rows it gives a batch); the batch's prompts are then shuffled
  (seeded by the batch index), and each is repeated G times in a row, as TRL's RepeatSampler does: a group's
  G completions come from one prompt, so groups never mix sources. The draw of batch b is a function of
  (seed, b) alone.
- **Resume.** The sampler starts at the number of generation batches already trained, which the ``Mixture``
  component counts and saves with every checkpoint (``rlpost_state.pt``); the run sets TrainingArguments'
  ``ignore_data_skip`` so transformers does not skip batches on top of it (rlpost/run.py). A resumed run draws
  exactly the batches an uninterrupted one draws.
- **Columns.** The training and held-out sets are every source's rows with the union of their columns (a column
  a source lacks is None on its rows); a column whose values differ in type between sources is dropped (with a
  warning) unless a reward term reads it, which is a ConfigError. Every source must agree on ``conversational``.
"""

from __future__ import annotations

import difflib
import logging
import math
import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any

from torch.utils.data import Sampler

from rlpost.core.component import Component, ScoringInputs
from rlpost.core.confdir import compose_options, group_options
from rlpost.core.config import check_columns
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range, build_config, to_container
from rlpost.data.sources import DataConfig, load_datasets

if TYPE_CHECKING:
    import datasets

logger = logging.getLogger(__name__)
SOURCE_COLUMN = "rlpost_source"  # each row's source name, in the training and held-out sets of a mixture
FRACTION_TOLERANCE = 1e-6  # the fractions sum to 1 within this
# names a source cannot take: its metrics would collide with the run's own (eval/accuracy, eval/env/...)
RESERVED = ("accuracy", "reward", "mean_length", "num_prompts", "env", "sampled")
NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def is_mixture(node: Any) -> bool:
    """The composed ``data`` node is a mixture (``data=mixture``: it has ``sources``)."""
    return isinstance(node, Mapping) and "sources" in node


@dataclass(frozen=True)
class SourceConfig:
    """One entry of ``data.sources``."""

    data: str  # a data option (conf/data/)
    fraction: Annotated[float, Range(gt=0, le=1, why="a share of each generation batch's prompts")]
    name: str | None = None  # its label in metrics (eval/<name>/accuracy, rewards/<name>/<term>/mean); null = data
    data_params: dict[str, Any] = field(default_factory=dict)  # keys set on the data option (mappings merge)
    reward: Any = None  # a reward option (conf/reward/), inline {terms: [...]}, or null: the run's reward
    env: Any = None  # a data/env option (conf/data/env/), an inline {name: ..., ...} node, or null: no episodes
    transform: Any = None  # a data/transform option, an inline node, or null: none


@dataclass(frozen=True)
class SourceReward:
    """An inline ``data.sources[i].reward``: the keys of a reward node a source may set (the run's ``reward.combine``
    and ``reward.breaker`` act on every source's terms)."""

    terms: Any = None  # [{name, weight, params, on_failure, timeout_s}]
    on_failure: Any = None  # the default failure policy of its terms
    timeout_s: Any = None  # seconds per batch call of each term


@dataclass(frozen=True)
class MixtureConfig:
    """The ``data`` node of ``data=mixture``."""

    sources: list[Any]  # SourceConfig entries
    env: dict[str, Any] = field(default_factory=lambda: {"name": "none"})  # none: each source sets its own
    transform: dict[str, Any] = field(default_factory=lambda: {"name": "none"})  # none: each source sets its own


@dataclass(frozen=True)
class SourceNodes:
    """One source's composed nodes (plain mappings), before any component is built."""

    name: str
    fraction: float
    where: str  # data.sources[i]
    data: dict[str, Any]  # the data option with data_params, env and transform set
    reward: dict[str, Any] | None  # its reward node, or None: the run's reward


def source_nodes(node: Mapping[str, Any], seed: int) -> list[SourceNodes]:
    """Validate the ``data`` node of a mixture and compose every source's options; ConfigError names the key."""
    spec = build_config(MixtureConfig, to_container(node), "data")
    for key, value in (("env", spec.env), ("transform", spec.transform)):
        if (value or {}).get("name", "none") != "none":
            raise ConfigError(
                f"data/{key}={value.get('name')} is set for the whole run, but data=mixture gives each source its own: "
                f"set data.sources[i].{key} (and leave data/{key}=none)."
            )
    entries = to_container(spec.sources) or []
    if not isinstance(entries, list) or not entries:
        raise ConfigError("data.sources must be a non-empty list of sources ({data: <option>, fraction: <share>}).")
    configs = []
    for i, entry in enumerate(entries):
        where = f"data.sources[{i}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(
                f"{where} must be a mapping {{data: <data option>, fraction: <share>, ...}}, got {entry!r}."
            )
        configs.append(build_config(SourceConfig, entry, where))
    names = [c.name or c.data for c in configs]
    check_fractions([c.fraction for c in configs], names)
    for i, name in enumerate(names):
        if not NAME.match(name) or name in RESERVED:
            raise ConfigError(
                f"data.sources[{i}].name={name!r}: a source's name labels its metrics (eval/<name>/accuracy): letters, "
                f"digits, _ . - only, and none of {', '.join(RESERVED)}."
            )
        if names.index(name) != i:
            raise ConfigError(
                f"data.sources[{i}]: the name {name!r} is taken by data.sources[{names.index(name)}]; give each "
                "source its own name (data.sources[i].name)."
            )
    return [_compose_source(c, name, f"data.sources[{i}]", seed) for i, (c, name) in enumerate(zip(configs, names))]


def check_fractions(fractions: list[float], names: list[str]) -> None:
    total = sum(fractions)
    if abs(total - 1.0) > FRACTION_TOLERANCE:
        shares = ", ".join(f"{n}={f:g}" for n, f in zip(names, fractions))
        raise ConfigError(
            f"data.sources fractions sum to {total:g}, not 1 ({shares}): each fraction is a source's share of every "
            "generation batch's prompts."
        )


def _compose_source(cfg: SourceConfig, name: str, where: str, seed: int) -> SourceNodes:
    overrides = [f"+data={_option('data', cfg.data, f'{where}.data')}", f"+seed={seed}"]
    if isinstance(cfg.reward, str):
        overrides.append(f"+reward={_option('reward', cfg.reward, f'{where}.reward')}")
    for key, value in (("env", cfg.env), ("transform", cfg.transform)):
        if isinstance(value, str):  # an option of conf/data/<key>/, composed as data/<key>=<option> would be
            overrides.append(f"+data/{key}={_option(f'data/{key}', value, f'{where}.{key}')}")
    composed = compose_options(overrides, where)
    data = {k: v for k, v in composed["data"].items() if k not in ("env", "transform")}
    data = _merged(data, cfg.data_params)
    for key, value in (("env", cfg.env), ("transform", cfg.transform)):
        data[key] = composed["data"][key] if isinstance(value, str) else _inline_node(value, f"{where}.{key}")
    reward = None
    if isinstance(cfg.reward, str):  # an option: its terms and failure policy (the run's combine and breaker apply)
        reward = {k: v for k, v in composed["reward"].items() if k not in ("combine", "breaker")}
    elif cfg.reward is not None:
        if not isinstance(cfg.reward, Mapping):
            raise ConfigError(
                f"{where}.reward must be a reward option (conf/reward/), an inline {{terms: [...]}} or null (the run's "
                f"reward), got {cfg.reward!r}."
            )
        inline = build_config(SourceReward, cfg.reward, f"{where}.reward")
        reward = {k: v for k, v in vars(inline).items() if v is not None}
    return SourceNodes(name=name, fraction=cfg.fraction, where=where, data=data, reward=reward)


def _option(group: str, option: str, key: str) -> str:
    """``option`` when it is one of ``group``'s (a mixture is no source's data), else a ConfigError listing them."""
    valid = [o for o in group_options(group) if not (group == "data" and o == "mixture")]
    if option not in valid:
        close = difflib.get_close_matches(option, valid, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"{key}={option!r} is no {group} option.{hint} Valid: {', '.join(valid)}.")
    return option


def _inline_node(value: Any, key: str) -> dict[str, Any]:
    """A source's inline ``env`` / ``transform`` node (a mapping with a name key), or none."""
    if value is None:
        return {"name": "none"}
    if isinstance(value, Mapping) and "name" in value:
        return dict(value)
    raise ConfigError(f"{key} must be an option name, a mapping with a name key, or null, got {value!r}.")


def _merged(base: dict[str, Any], params: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``params`` set on it; a mapping set on a mapping merges into it key by key."""
    out = dict(base)
    for key, value in (params or {}).items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(dict(out[key]), value)
        else:
            out[key] = value
    return out


# ---- which sources a generation batch draws from ------------------------------------------------
class Allocation:
    """The prompts of each source in generation batch b (module docstring): ``counts(b)`` [S], summing to P."""

    def __init__(self, fractions: list[float], prompts: int):
        total = sum(fractions)
        self.prompts = prompts
        self.quota = [f / total * prompts for f in fractions]  # [S] each source's share of one batch
        self.base = [round(q) if abs(q - round(q)) < FRACTION_TOLERANCE else math.floor(q) for q in self.quota]
        self.extra = prompts - sum(self.base)  # prompts left after the whole shares (0 when every share is whole)
        self._drawn: list[list[int]] = [[0] * len(fractions)]  # [b][S]: prompts of each source before batch b

    def drawn_before(self, batch: int) -> list[int]:
        """[S] the prompts each source gave to batches 0 .. batch - 1."""
        while len(self._drawn) <= batch:
            b = len(self._drawn) - 1
            self._drawn.append([d + c for d, c in zip(self._drawn[b], self._counts(b, self._drawn[b]))])
        return self._drawn[batch]

    def counts(self, batch: int) -> list[int]:
        return self._counts(batch, self.drawn_before(batch))

    def _counts(self, batch: int, drawn: list[int]) -> list[int]:
        counts = list(self.base)
        if self.extra:
            debt = [round(q * (batch + 1) - d - c, 9) for q, d, c in zip(self.quota, drawn, counts)]
            for s in sorted(range(len(counts)), key=lambda s: (-debt[s], s))[: self.extra]:
                counts[s] += 1
        return counts


class MixtureSampler(Sampler[int]):
    """TRL's RepeatSampler contract over a mixture: generation batches of P prompts drawn by the allocation, each
    prompt index G times in a row, each batch ``repeat_count`` times. Starts at batch ``start()`` (the batches
    already trained, read at the first ``__iter__``, after a checkpoint's state was restored); each ``__iter__``
    (one epoch of transformers' loop) continues where the last one stopped."""

    def __init__(
        self,
        rows: list[list[int]],
        allocation: Allocation,
        *,
        mini_repeat_count: int,
        repeat_count: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        start: Callable[[], int] = lambda: 0,
    ):
        self.rows = rows  # [S] the dataset indices of each source
        self.allocation = allocation
        self.mini_repeat_count, self.repeat_count = mini_repeat_count, repeat_count
        self.shuffle, self.seed, self.start = shuffle, seed, start
        self.batches_per_epoch = max(1, math.ceil(sum(map(len, rows)) / allocation.prompts))
        self._next: int | None = None
        self._perms: dict[int, dict[int, list[int]]] = {}  # source -> pass -> its order

    def batch(self, b: int) -> list[int]:
        """Dataset indices of generation batch ``b``'s P prompts, in the order they are generated."""
        drawn, counts = self.allocation.drawn_before(b), self.allocation.counts(b)
        chunk = [self._row(s, k) for s, c in enumerate(counts) for k in range(drawn[s], drawn[s] + c)]
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + b).shuffle(chunk)
        return chunk

    def _row(self, source: int, k: int) -> int:
        """The k-th draw of ``source``: pass k // n over its rows, a fresh seeded permutation per pass."""
        n = len(self.rows[source])
        return self.rows[source][self._pass(source, k // n)[k % n]]

    def _pass(self, source: int, p: int) -> list[int]:
        """Pass ``p`` over a source's n rows: a seeded permutation whose first k rows are none of the previous pass's
        last k (k: the most prompts the source gives one batch), so a batch that spans two passes holds no row twice
        (while n >= 2k). Each pass depends on the one before: computed in order from the last one kept."""
        cache = self._perms.setdefault(source, {})
        n = len(self.rows[source])
        k = self.allocation.base[source] + (1 if self.allocation.extra else 0)
        for q in range(max((q + 1 for q in cache if q < p), default=0), p + 1):
            if q in cache:
                continue
            order = list(range(n))
            if self.shuffle:
                random.Random((self.seed * 1_000_033 + source) * 1_000_037 + q).shuffle(order)
            if q > 0 and 2 * k <= n:
                tail = set(cache[q - 1][n - k :])
                free = (j for j in range(k, n) if order[j] not in tail)
                for i in range(k):
                    if order[i] in tail:
                        j = next(free)
                        order[i], order[j] = order[j], order[i]
            cache[q] = order
            cache.pop(q - 2, None)  # two passes kept: the one in use and the one before
        return cache[p]

    def __iter__(self) -> Iterator[int]:
        if self._next is None:
            self._next = self.start()
        first, self._next = self._next, self._next + self.batches_per_epoch
        for b in range(first, first + self.batches_per_epoch):
            chunk = self.batch(b)
            for _ in range(self.repeat_count):
                for index in chunk:
                    for _ in range(self.mini_repeat_count):
                        yield index

    def __len__(self) -> int:
        return self.batches_per_epoch * self.allocation.prompts * self.mini_repeat_count * self.repeat_count


# ---- the built mixture ----------------------------------------------------------------------------
@dataclass
class Source:
    """One built source: its data, transform, environment, reward and correctness criterion."""

    name: str
    fraction: float
    data: DataConfig
    transform: Any = None  # its built data.transform (rlpost/transforms/)
    env: Any = None  # its environment (rlpost/envs/), or None: single completions
    reward: Any = None  # its own terms as a rlpost.run.RewardParts (unprefixed names; the run's combine)
    correct: Any = None  # its eval/<name>/accuracy criterion (rlpost/scoring/correctness.py), or None


class Mixture(Component):
    """data=mixture: each generation batch draws its prompts from the sources by their fractions."""

    stateful = True  # the generation batches trained: where the sampler continues after a resume

    def __init__(self, sources: list[Source]):
        super().__init__(self.Config())
        if len({s.data.conversational for s in sources}) > 1:
            raise ConfigError(
                "data.sources differ in data.conversational (chat messages and plain strings cannot share a batch); "
                "set data.sources[i].data_params.conversational the same for every source."
            )
        self.sources = sources
        self.batches = 0  # generation batches trained so far
        self.allocation: Allocation | None = None  # made with the sampler (it knows P)

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def describe(self) -> str:
        return "mixture of " + ", ".join(f"{s.name} ({s.fraction:g})" for s in self.sources)

    def describe_lines(self, prompts_per_batch: int) -> list[str]:
        """``rlpost show``: each source's share of a generation batch of ``prompts_per_batch`` prompts, its data,
        environment and reward terms."""
        allocation = Allocation([s.fraction for s in self.sources], prompts_per_batch)
        lines = []
        for s, quota in zip(self.sources, allocation.quota):
            share = (
                f"{quota:g} prompts per batch"
                if float(quota).is_integer()
                else f"{quota:.3g} prompts per batch on average"
            )
            what = s.data.task or s.data.path or s.data.source
            env = s.env.registry_name if s.env is not None else "none"
            terms = ", ".join(f"{w:g} x {n}" for n, w in zip(s.reward.names, s.reward.weights.tolist()))
            lines.append(f"  {s.name:<14} {s.fraction:g} ({share}); data {what}, env {env}; reward {terms}")
        if allocation.extra:
            lines.append(f"  {allocation.extra} prompt(s) per batch go to the sources furthest behind their share")
        return lines

    def sampler(
        self,
        dataset: Any,
        *,
        generation_batch_prompts: int,
        num_generations: int,
        seed: int,
        repeat_count: int = 1,
        shuffle: bool = True,
    ) -> MixtureSampler:
        labels = list(dataset[SOURCE_COLUMN])
        rows = [[i for i, label in enumerate(labels) if label == s.name] for s in self.sources]
        self.allocation = Allocation([s.fraction for s in self.sources], generation_batch_prompts)
        return MixtureSampler(
            rows,
            self.allocation,
            mini_repeat_count=num_generations,
            repeat_count=repeat_count,
            shuffle=shuffle,
            seed=seed,
            start=lambda: self.batches,
        )

    def score_rollouts(self, x: ScoringInputs) -> dict[str, Any]:
        """Count a trained generation batch; log each source's prompts in it (``mixture/<name>/prompts``, the
        whole batch) and the mean task reward of its rows (``mixture/<name>/reward``, this process's rows)."""
        if not x.training:
            return {}
        if self.allocation is not None:
            for name, count in zip(self.names, self.allocation.counts(self.batches)):
                x.log(f"mixture/{name}/prompts", float(count))
        if x.task_rewards is not None:
            rewards = x.task_rewards[x.local].float().cpu()
            for name in self.names:
                mine = [r for row, r in zip(x.rows, rewards.tolist()) if row.get(SOURCE_COLUMN) == name]
                scored = [r for r in mine if not math.isnan(r)]
                if scored:
                    x.log(f"mixture/{name}/reward", sum(scored) / len(scored))
        self.batches += 1
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"batches": self.batches}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches = int(state["batches"])

    def check_run(self, run: Any) -> None:
        algo = run.algorithm
        others = [
            name
            for name, c in run.named_components()
            if c is not self and type(c).sampler is not Component.sampler and name != "data.mixture"
        ]
        if others:
            raise ConfigError(
                f"data=mixture draws each batch's prompts by source, and {others[0]} chooses them too (its own "
                "sampler); the two cannot be combined."
            )
        if algo.max_refill_rounds and algo.dynamic_sampling:
            raise ConfigError(
                f"data=mixture cannot be combined with algorithm.max_refill_rounds={algo.max_refill_rounds}: refill "
                "rounds draw fresh prompts from the whole training set, not by the sources' fractions."
            )
        if algo.offline is not None:
            raise ConfigError("data=mixture cannot be combined with algorithm.replay: replays sample no prompts.")

    def load(self, eval_columns: dict[str, str] | None = None) -> tuple[datasets.Dataset, datasets.Dataset]:
        """Every source's (train, held-out) rows labelled with ``rlpost_source``, each source's reward columns and
        ``eval_columns`` (``{"eval.<key>": column}``, ``EvalSettings.data_columns``) checked against its own splits;
        ConfigError before any model loads."""
        train_rows: list[dict] = []
        eval_rows: list[dict] = []
        needed: set[str] = set()
        for i, source in enumerate(self.sources):
            where = f"data.sources[{i}] ({source.name})"
            train, held = load_datasets(source.data, source.transform)
            if len(train) == 0:
                raise ConfigError(f"{where} has no training rows.")
            for name, func in zip(source.reward.names, source.reward.funcs):
                for param, col in func.data_columns():
                    needed.add(col)
                    for split, data in (("training", train), ("held-out", held)):
                        if col not in data.column_names:
                            raise ConfigError(
                                f"{where}: reward term {name}: params.{param}={col!r} names no column of its {split} "
                                f"data; its columns are: {', '.join(data.column_names)}"
                            )
            check_columns(eval_columns or {}, held.column_names, f"{where}'s eval split")
            train_rows += [{**row, SOURCE_COLUMN: source.name} for row in train.to_list()]
            eval_rows += [{**row, SOURCE_COLUMN: source.name} for row in held.to_list()]
        return union_dataset(train_rows, needed), union_dataset(eval_rows, needed)


def union_dataset(rows: list[dict], needed: set[str] = frozenset()) -> datasets.Dataset:  # type: ignore[assignment]
    """Rows with different columns -> one Dataset over the union of their columns (None where a row lacks one); a
    column whose values differ in type is dropped, or a ConfigError when a reward term reads it (``needed``)."""
    import datasets

    keys = list(dict.fromkeys(k for row in rows for k in row))
    types: dict[str, set[type]] = {k: set() for k in keys}
    for row in rows:
        for k, v in row.items():
            if v is not None:
                types[k].add(list if isinstance(v, list) else type(v))
    mixed = [k for k in keys if len(types[k]) > 1]
    if "prompt" in mixed:
        raise ConfigError("the sources' prompts differ in kind (chat messages and plain strings): set the same "
                          "data.conversational for every source (data.sources[i].data_params.conversational).")  # fmt: skip
    for k in mixed:
        if k in needed:
            raise ConfigError(
                f"column {k!r} holds values of different types in different sources ({', '.join(sorted(t.__name__ for t in types[k]))}), "
                "and a reward term reads it; give it one type in every source."
            )
        logger.warning("data=mixture: column %r differs in type between sources; dropped", k)
    keep = [k for k in keys if k not in mixed]
    return datasets.Dataset.from_list([{k: row.get(k) for k in keep} for row in rows])
