"""``eval.sets``: more held-out sets, each a data config with its own reward, size and sampling.

    rlpost train eval.sets=[gsm_symbolic,chain_sum] eval.every=10

A set is named after a file of ``conf/eval_sets/`` (``EvalSetConfig``: a data option of
``conf/data/``, a reward option of ``conf/reward/``, the size, greedy and sampled metrics), or given
inline as a mapping with the same keys (``eval.sets=[{name: gsm, data: gsm_symbolic, size: 20}]``).
The data and reward options are composed the way ``data=`` and ``reward=`` compose them on the
command line (Hydra's compose API, ``${seed}`` = the run's seed), so a set scores exactly what a run
on that data and reward would score. Every set is validated, and its reward built, before any model
loads. Each evaluation of the run (``eval.at_start``, every ``eval.every`` steps, ``eval.at_end``)
scores every set and logs ``eval/<set>/<metric>``: greedy ``accuracy`` (only with a correctness
criterion, rlpost/scoring/correctness.py), ``reward``, ``mean_length``, ``abstention/{precision,recall,f1}``
(with a reward term that scores abstention, rlpost/evaluation/abstention.py), and with ``samples: n`` the sampled
``avg@n``, ``pass@k`` and ``maj@k`` (rlpost/evaluation/evaluate.py ``sample_metrics``); a set takes the run's
``group_by``, ``variants_of``, ``calibration`` and ``without_demos`` readouts as keys of its own (its data's columns).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from rlpost.core.confdir import CONF_DIR, compose_options, group_options
from rlpost.core.config import readout_columns
from rlpost.core.errors import ConfigError
from rlpost.core.schema import Range, build_config, to_container
from rlpost.data.sources import DataConfig
from rlpost.rewards.group import ANSWER_CHOICES
from rlpost.run import RewardParts
from rlpost.scoring.correctness import AUTO, Correctness, find_correctness, verifiable_terms
from rlpost.transforms.base import build_transform

SETS_DIR = CONF_DIR / "eval_sets"


@dataclass(frozen=True)
class EvalSetConfig:
    """One ``eval.sets`` entry."""

    name: str  # the set's name in metric keys: eval/<name>/accuracy
    data: str  # a data option (conf/data/): its eval split is scored
    reward: str | None = None  # a reward option (conf/reward/); null = the run's own reward
    data_params: dict[str, Any] | None = None  # keys set on the data option, e.g. {eval_size: 50}
    size: Annotated[int, Range(ge=1)] = 100  # held-out prompts scored (<= the data's eval_size)
    greedy: bool = True  # greedy accuracy, reward and mean length
    samples: Annotated[int, Range(ge=0, why="0 = greedy only")] = 0  # sampled completions per prompt
    pass_k: list[Annotated[int, Range(ge=1)]] = field(
        default_factory=lambda: [1]
    )  # pass@k and maj@k for each k <= samples
    majority_answer: str | None = "last_number"  # what a sample votes for in maj@k (null: no maj@k)
    correct_term: str | None = AUTO  # the term that decides correctness (rlpost/scoring/correctness.py)
    correct_threshold: Annotated[float, Range()] = 1.0  # correct when that term scores at least this
    max_new_tokens: Annotated[int | None, Range(ge=1)] = None  # null = train.max_completion_length
    group_by: str | None = None  # a data column to also report accuracy per value of (eval.group_by)
    variants_of: str | None = None  # a column naming the question a row is a variant of (eval.variants_of)
    calibration: str | None = None  # a column of numeric targets of the sampled predictions (eval.calibration)
    calibration_level: Annotated[float, Range(gt=0, lt=1)] = 0.8  # the central interval whose coverage is reported
    without_demos: str | None = None  # a column of each prompt's turn without demonstrations (eval.without_demos)

    def __post_init__(self):
        if not self.greedy and self.samples < 1:
            raise ValueError("greedy=false and samples=0 leave nothing to evaluate; set samples=<n>")
        if self.calibration is not None and self.samples < 2:
            raise ValueError(f"calibration={self.calibration!r} reads a distribution of predictions; set samples >= 2")
        for key in ("variants_of", "without_demos"):
            if getattr(self, key) is not None and not self.greedy:
                raise ValueError(f"{key}={getattr(self, key)!r} reads the greedy verdicts; set greedy=true")

    def data_columns(self) -> dict[str, str]:
        """``{"<key>": column}``: every held-out data column the set's evaluation reads."""
        return readout_columns(self)
        if self.majority_answer is not None and self.majority_answer not in ANSWER_CHOICES:
            raise ValueError(f"majority_answer={self.majority_answer!r}; valid: {', '.join(ANSWER_CHOICES)} (or null)")


@dataclass
class EvalSet:
    """A validated set: its data config, built reward and correctness criterion."""

    cfg: EvalSetConfig
    data: DataConfig
    reward: RewardParts
    correct: Correctness | None
    transform: Any = None  # the set's built data.transform (rlpost/transforms/); None: rows as they are

    @property
    def prefix(self) -> str:
        return f"eval/{self.cfg.name}"


def set_names() -> list[str]:
    """The named sets: the files of conf/eval_sets/."""
    return sorted(p.stem for p in SETS_DIR.glob("*.yaml"))


def build_eval_sets(
    entries: list[Any],
    seed: int,
    run_reward: RewardParts,
    build_reward: Callable[[Any], RewardParts],
    sources: list[str] | None = None,
) -> list[EvalSet]:
    """``eval.sets`` -> validated sets (ConfigError naming ``eval.sets[i]`` on any problem); ``build_reward``
    builds a reward node (rlpost/build.py, which calls this). ``sources``: a data=mixture run's source names (a set
    may not take one, their metrics share eval/<name>/, and must name its reward: the run's scores sources' rows)."""
    sets, names = [], set()
    for i, entry in enumerate(to_container(entries) or []):
        where = f"eval.sets[{i}]"
        cfg = build_config(EvalSetConfig, _entry_node(entry, where), where)
        if cfg.name in names:
            raise ConfigError(f"{where}: the set name {cfg.name!r} is used twice; each set needs its own name.")
        if cfg.name in ("env", "accuracy", "reward", "mean_length", "abstention", *(sources or [])) or "/" in cfg.name:
            raise ConfigError(f"{where}.name={cfg.name!r} would collide with the run's own eval/ metrics.")
        if sources is not None and cfg.reward is None:
            raise ConfigError(
                f"{where}.reward is null (the run's reward), but a data=mixture run's reward scores each source's own "
                "rows; name the set's reward (a conf/reward/ option)."
            )
        names.add(cfg.name)
        sets.append(_build_set(cfg, seed, run_reward, build_reward, where))
    return sets


def _entry_node(entry: Any, where: str) -> dict[str, Any]:
    if isinstance(entry, str):
        if entry not in set_names():
            close = difflib.get_close_matches(entry, set_names(), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{where}={entry!r} is no eval set.{hint} Named sets (conf/eval_sets/): {', '.join(set_names())}; "
                "or give one inline: {name: ..., data: <data option>, reward: <reward option>, size: ...}."
            )
        from omegaconf import OmegaConf

        node = OmegaConf.to_container(OmegaConf.load(SETS_DIR / f"{entry}.yaml"), resolve=True)
        return {"name": entry, **node}
    if isinstance(entry, Mapping):
        return dict(entry)
    raise ConfigError(f"{where} must be a set name or a mapping {{name, data, reward, size, ...}}, got {entry!r}.")


def _build_set(cfg: EvalSetConfig, seed: int, run_reward: RewardParts, build_reward, where: str) -> EvalSet:
    composed = _compose_options(cfg.data, cfg.reward, seed, where)
    data_node = {**composed["data"], **(cfg.data_params or {})}
    data = build_config(DataConfig, data_node, f"{where}.data")
    if data.source == "benchmark":  # its wheel is here, before any model loads
        from rlpost.data.benchmarks import check_benchmark

        try:
            check_benchmark(data.task)
        except ConfigError as err:
            raise ConfigError(f"{where}: {err}") from None
    if data.eval_size < cfg.size:
        raise ConfigError(
            f"{where}.size={cfg.size} but data={cfg.data} holds {data.eval_size} held-out prompts; "
            f"lower size or set {where}.data_params.eval_size."
        )
    reward = build_reward(composed["reward"]) if cfg.reward is not None else run_reward
    correct = find_correctness(
        verifiable_terms(reward.funcs), reward.names, cfg.correct_term, cfg.correct_threshold, where
    )
    for key in ("variants_of", "without_demos"):
        if getattr(cfg, key) is not None and correct is None:
            raise ConfigError(f"{where}.{key}={getattr(cfg, key)!r} compares correctness verdicts, but the set has no "
                              "correctness criterion (a verifiable reward term, or correct_term).")  # fmt: skip
    transform = build_transform(data.transform, f"{where}.data.transform")
    return EvalSet(cfg=cfg, data=data, reward=reward, correct=correct, transform=transform)


def _compose_options(data: str, reward: str | None, seed: int, where: str) -> dict[str, Any]:
    """The ``data`` (and ``reward``) options as ``data=`` / ``reward=`` compose them, ``${seed}`` resolved."""
    for group, option in (("data", data), ("reward", reward)):
        options = group_options(group)
        if option is not None and option not in options:
            raise ConfigError(f"{where}.{group}={option!r} is no {group} option; valid: {', '.join(options)}.")
    overrides = [f"+data={data}", f"+seed={seed}", *([f"+reward={reward}"] if reward is not None else [])]
    return compose_options(overrides, where)
