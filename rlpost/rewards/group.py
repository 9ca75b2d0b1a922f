"""Group-level rewards: rewards that score a completion against the other completions of its prompt.

Majority vote and CoRE (seed 000 #5), DAR (seed 004 #15), group diversity and pairwise preference
(seed 004 #18) and self-competitive ranking (seed 000 #7) all need the whole group of G completions
of a prompt. TRL calls a reward function on each process with that process's *local* completions,
and a group may straddle two processes (TRL splits the generation batch by position, not by
prompt: with 2 processes, 2 completions per process and G = 4, each group is half on each).

The design (chosen over scoring in the advantage seam, so that a group reward stays an ordinary
reward column ``[N]`` that combines, logs and normalizes like any other term):

1. ``GroupReward.__call__`` gathers the local prompts, completions and dataset columns of every
   process (``torch.distributed.all_gather_object``; TRL calls every reward on every process in
   the same order, so the collective is matched). The gathered batch is in rank order, which is
   TRL's own order for the ``[N, R]`` reward matrix, so groups are contiguous runs of G.
2. It scores only the groups that overlap this process's slice (a straddling group is scored on
   both processes from the same gathered inputs; a deterministic scorer gives both the same
   values) and returns its local slice ``[B]``. On one process nothing is gathered.
3. G comes from the trainer: it sets ``group_size`` (train: ``num_generations``, eval:
   ``num_generations_eval``) on every reward whose ``is_group_reward`` is true before TRL calls it.
   Without a trainer (plain TRL, ``rlpost eval``, unit tests) ``group_size`` is ``None`` and the
   groups are the runs of consecutive identical prompts.

A subclass implements ``score_group(prompts [G], completions [G], rows) -> (rewards [G], metrics)``,
where ``rows`` maps each dataset column to its ``[G]`` values. Metrics are averaged over the groups
a process scored and logged through TRL's ``log_metric`` as ``<term name>/<metric>``.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch.distributed as dist

from rlpost.rewards.base import Reward
from rlpost.rewards.math_answer import last_number

NOT_COLUMNS = ("trainer_state", "log_extra", "log_metric", "environments", "completion_ids")


def world() -> tuple[int, int]:
    """(number of processes, this process's rank) of the default torch.distributed group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def group_bounds(prompts: list, group_size: int | None) -> list[tuple[int, int]]:
    """Groups of a gathered batch ``[N]`` as ``(start, end)``: runs of G, or of identical prompts."""
    n = len(prompts)
    if group_size is not None:
        if group_size < 1 or n % group_size:
            raise ValueError(f"a group reward got {n} completions, not a multiple of the group size {group_size}")
        return [(s, s + group_size) for s in range(0, n, group_size)]
    bounds, start = [], 0
    for i in range(1, n + 1):
        if i == n or prompts[i] != prompts[start]:
            bounds.append((start, i))
            start = i
    return bounds


class GroupReward(Reward):
    """Base of group-level rewards (module docstring): gather, split into groups, score, slice."""

    is_group_reward = True  # the trainer sets group_size (G) before each call; never scored one sample at a time

    def score_group(self, prompts: list, completions: list, rows: dict[str, list]) -> tuple[list, dict[str, float]]:
        raise NotImplementedError(f"{type(self).__name__} must define score_group (the hook each subclass fills)")

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        """Local ``completions [B]`` -> rewards ``[B]``, each scored within its whole (gathered) group."""
        n_local = len(completions)
        columns = {
            k: list(v)
            for k, v in kwargs.items()
            if k not in NOT_COLUMNS and isinstance(v, (list, tuple)) and len(v) == n_local
        }
        size, rank = world()
        parts = [(list(prompts), list(completions), columns)]
        if size > 1:
            gathered: list[Any] = [None] * size
            dist.all_gather_object(gathered, (list(prompts), list(completions), columns))
            parts = gathered
        offset = sum(len(p[1]) for p in parts[:rank])
        all_prompts = [p for part in parts for p in part[0]]
        all_completions = [c for part in parts for c in part[1]]
        all_columns = {k: [v for part in parts for v in part[2][k]] for k in columns}
        out: list[float | None] = [None] * len(all_completions)
        metrics: dict[str, list[float]] = {}
        for start, end in group_bounds(all_prompts, self.group_size):
            if end <= offset or start >= offset + n_local:
                continue  # another process's group
            rows = {k: v[start:end] for k, v in all_columns.items()}
            values, group_metrics = self.score_group(all_prompts[start:end], all_completions[start:end], rows)
            if len(values) != end - start:
                raise ValueError(f"{type(self).__name__} scored {len(values)} of a group of {end - start}")
            out[start:end] = values
            for key, value in group_metrics.items():
                if value is not None and not math.isnan(value):
                    metrics.setdefault(key, []).append(float(value))
        log = kwargs.get("log_metric")
        if callable(log):
            name = self.__name__
            for key, values in metrics.items():
                log(f"{name}/{key}", sum(values) / len(values))
        return out[offset : offset + n_local]


# ---- answers: what majority vote and CoRE compare ------------------------------------------------

_BOXED = re.compile(r"\\boxed\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}")


def extract_answer(text: str, how: str) -> str | None:
    """The answer of a completion as a canonical string, or None when it has none.

    ``last_number``: the last number, canonicalized (``"4"``, ``"4.0"`` and ``"4,000"``/``"4000"``
    compare equal: ``"4"``, ``"4000"``); ``boxed``: the last ``\\boxed{...}``, spaces removed;
    ``text``: the whole stripped text, lower-cased, inner whitespace collapsed (empty -> None).
    """
    if how == "last_number":
        value = last_number(text)
        if value is None:
            return None
        return str(int(value)) if value == int(value) and abs(value) < 1e15 else repr(value)
    if how == "boxed":
        found = _BOXED.findall(text)
        return re.sub(r"\s+", "", found[-1]) if found else None
    if how == "text":
        norm = " ".join(text.split()).lower()
        return norm or None
    raise ValueError(f"unknown answer extraction {how!r}; choices: last_number, boxed, text")


ANSWER_CHOICES = ("last_number", "boxed", "text")
