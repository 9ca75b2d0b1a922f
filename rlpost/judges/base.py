"""The judge base class, its registry, and what every backend shares: verdict parsing, the failure
outcome, failure counting and the on-disk response cache.

A judge maps judge prompts ``[M]`` (full texts, built by the reward that uses it) to scores ``[M]``
in [0, 1], or ``None`` for a prompt it could not score under ``on_failure=skip``. Two verdict modes:

- ``yes_no``: the prompt asks a question whose "Yes" means the good behaviour (DESIGN.md: SmolLM2
  is a usable yes/no scorer only when phrased so). A local model gives
  ``sigmoid(logit("Yes") - logit("No"))`` = P(Yes | Yes or No) at the first answer token; an
  endpoint gives the same from its top log-probs when ``logprobs`` is on, else 1.0 for a reply
  starting "yes", 0.0 for "no".
- ``scale``: the prompt asks for a number from 1 to 10; the first integer of the reply, s, gives
  ``(s - 1) / 9``. No integer in 1..10 is a malformed verdict.

Failure outcome (``on_failure``), applied per judge prompt after the backend's own retries:
``skip`` -> ``None`` (the reward term does not apply to that sample: NaN in the reward matrix),
``zero`` -> 0.0, ``abort`` -> ``JudgeError`` (the step fails). Every failure is counted in
``stats`` (``calls``, ``failures``, ``cache_hits``) and logged as one warning per batch with its
first reason. The outcome is the judge's own: the reward-level failure policy of the trainer sees a
judge that either returned or raised.

Cache: one JSON file per response under ``cache_path`` (default ``$RLPOST_CACHE/judge``), named by
sha256 of (backend identity, mode, prompt); written to a temporary file and renamed, so concurrent
processes never read half a file. Only successful scores are cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlpost.core.component import Component
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry
from rlpost.core.schema import build_config, check_paths, key_path, to_container

logger = logging.getLogger(__name__)

ON_FAILURE = ("skip", "zero", "abort")
MODES = ("yes_no", "scale")
ANSWER_FORMAT = {  # what the reward appends to a judge prompt, per verdict mode
    "yes_no": "Answer with Yes or No only.",
    "scale": "Answer with a single number from 1 (worst) to 10 (best) only.",
}


class JudgeError(RuntimeError):
    """A judge failed and its ``on_failure`` is ``abort``."""


def build_judge(node: Mapping[str, Any] | None, where: str) -> Judge:
    """``{backend: local|openai, ...that backend's Config}`` -> a judge; ConfigError naming ``where``.

    Builds only: a local judge loads its model on first use, so bad input fails before any load.
    """
    node = dict(to_container(node) or {})
    backend = node.pop("backend", "local")
    try:
        cls = JUDGES.get(backend)
    except ConfigError as err:
        raise ConfigError(f"{key_path(where, 'backend')}: {err}") from None
    cfg = build_config(cls.Config, node, where)
    check_paths(cfg, where)  # e.g. a local judge's model.path
    return cls(cfg)


def check_common(cfg: Any) -> None:
    """``__post_init__`` checks every backend Config shares."""
    if cfg.mode not in MODES:
        raise ValueError(f"Invalid mode {cfg.mode!r}. Valid choices: {', '.join(MODES)}.")
    if cfg.on_failure not in ON_FAILURE:
        raise ValueError(f"Invalid on_failure {cfg.on_failure!r}. Valid choices: {', '.join(ON_FAILURE)}.")


def parse_yes_no(text: str) -> float | None:
    """1.0 for a reply starting "yes", 0.0 for "no" (case, quotes, ``*`` and spaces ignored), else None."""
    word = re.match(r"[\s\"'*`_(\[]*([A-Za-z]+)", text or "")
    verdict = word.group(1).lower() if word else ""
    return {"yes": 1.0, "no": 0.0}.get(verdict)


def parse_scale(text: str) -> float | None:
    """``(s - 1) / 9`` for the first integer s of the reply when 1 <= s <= 10, else None."""
    found = re.search(r"(?<![\d.])(\d+)(?!\.?\d)", text or "")
    if not found or not 1 <= int(found.group(1)) <= 10:
        return None
    return (int(found.group(1)) - 1) / 9


def yes_probability(logit_yes: float, logit_no: float) -> float:
    """``sigmoid(logit_yes - logit_no)``: P(Yes) renormalized over {Yes, No}."""
    return 1.0 / (1.0 + math.exp(-(logit_yes - logit_no)))


class DiskCache:
    """Judge responses on disk, one small JSON file per (identity, mode, prompt) key."""

    def __init__(self, folder: str | os.PathLike, identity: str):
        self.folder = Path(folder).expanduser()
        self.identity = identity

    def path(self, mode: str, prompt: str) -> Path:
        key = hashlib.sha256(json.dumps([self.identity, mode, prompt]).encode()).hexdigest()
        return self.folder / key[:2] / f"{key}.json"

    def get(self, mode: str, prompt: str) -> float | None:
        try:
            return float(json.loads(self.path(mode, prompt).read_text())["score"])
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, mode: str, prompt: str, score: float) -> None:
        path = self.path(mode, prompt)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            json.dump({"score": score}, handle)
        os.replace(tmp, path)


def default_cache_path() -> Path:
    from rlpost.models.bundled import cache_dir

    return cache_dir() / "judge"


class Judge(Component):
    """Cache lookup, failure outcome and counting around a backend's ``_judge(prompts)``.

    ``_judge`` returns, per prompt, a score in [0, 1] or an ``Exception`` saying why it failed.
    """

    name = "judge"
    cache: DiskCache | None = None

    def __init__(self, cfg: Any):
        super().__init__(cfg)
        self.mode = cfg.mode
        self.stats = {"calls": 0, "failures": 0, "cache_hits": 0}

    def _judge(self, prompts: list[str]) -> list[float | Exception]:
        raise NotImplementedError

    def score(self, prompts: list[str]) -> list[float | None]:
        """Judge prompts ``[M]`` -> scores ``[M]`` in [0, 1] (``None``: failed, ``on_failure=skip``)."""
        results: list[float | Exception | None] = [None] * len(prompts)
        todo = []
        for i, prompt in enumerate(prompts):
            cached = self.cache.get(self.mode, prompt) if self.cache else None
            if cached is None:
                todo.append(i)
            else:
                results[i] = cached
        self.stats["cache_hits"] += len(prompts) - len(todo)
        self.stats["calls"] += len(todo)
        if todo:
            for i, value in zip(todo, self._judge([prompts[i] for i in todo])):
                results[i] = value
                if self.cache and not isinstance(value, Exception):
                    self.cache.put(self.mode, prompts[i], value)
        failed = [r for r in results if isinstance(r, Exception)]
        if not failed:
            return [r for r in results if not isinstance(r, Exception)]  # all of them
        self.stats["failures"] += len(failed)
        outcome = self.cfg.on_failure
        message = f"judge {self.name}: {len(failed)} of {len(prompts)} prompts failed (first: {failed[0]})"
        if outcome == "abort":
            raise JudgeError(f"{message}; on_failure=abort")
        logger.warning("%s; on_failure=%s", message, outcome)
        fill = None if outcome == "skip" else 0.0
        return [fill if isinstance(r, Exception) else r for r in results]


JUDGES: Registry[Judge] = Registry("judge", Judge)

__all__ = [
    "ANSWER_FORMAT",
    "JUDGES",
    "DiskCache",
    "Judge",
    "JudgeError",
    "build_judge",
    "parse_scale",
    "parse_yes_no",
    "yes_probability",
]
