"""A reward term that scores several columns becomes one TRL reward function per column.

TRL's reward matrix has one column per reward function, ``[N, R]``, and rlpost's combiners weigh
those columns (rlpost/combine/). A term whose reward declares ``output_columns()`` (``reward=rubric``
with ``columns=criteria``: one column per criterion) is split here into C sibling functions named
``<term>/<column>``, each with weight ``term weight * w_c / sum_k w_k``: the column weights keep the
term's total weight, so a weighted sum of the columns is the term's weighted mean.

The siblings share one ``ColumnTable``. The first sibling TRL calls for a batch computes the whole
``[N, C]`` table (one pass of judge calls); the others read their column from it. TRL calls every
reward function with the same ``prompts`` and ``completions`` list objects, and the table keeps
those objects (so their ids cannot be reused by a later batch): a call with other lists, a new
batch or the failure guard's one-sample retry (rlpost/scoring/guard.py), is computed afresh.
The first sibling stands for the term as a component (``check_run``, ``describe``); a stateful
reward that holds a state (a non-empty ``state_dict``) cannot be split (its state would be saved once per column).
"""

from __future__ import annotations

from typing import Any

import torch

from rlpost.core.errors import ConfigError
from rlpost.rewards.base import Reward


class ColumnTable:
    """The ``[N][C]`` scores of one multi-column reward for the batch in flight."""

    def __init__(self, reward: Reward):
        self.reward = reward
        self._inputs: tuple[list, list] | None = None
        self._table: list[list[float | None]] = []

    def column(self, c: int, prompts: list, completions: list, kwargs: dict) -> list[float | None]:
        if self._inputs is None or self._inputs[0] is not prompts or self._inputs[1] is not completions:
            self._table = self.reward.column_scores(prompts, completions, **kwargs)
            self._inputs = (prompts, completions)
        return [row[c] for row in self._table]


class RewardColumn(Reward):
    """Column ``c`` of a multi-column reward: TRL's reward-function signature, one value per completion."""

    def __init__(self, table: ColumnTable, c: int, name: str):  # not a registered reward: no Config
        self.cfg = table.reward.cfg
        self.table, self.c = table, c
        self.__name__ = name
        self.requires = table.reward.requires
        self.rollout_fields = table.reward.rollout_fields
        self.mean_weights = table.reward.column_mean_weights(c)  # e.g. IFEval's instruction-level columns

    def is_verifiable(self, env: Any = None) -> bool:
        return self.table.reward.is_verifiable(env)

    def score_range(self) -> tuple[float, float] | None:
        return self.table.reward.score_range()  # each column scores on the term's scale

    def data_columns(self) -> list[tuple[str, str]]:
        return self.table.reward.data_columns()  # the term's own, e.g. stage_check's stages[i].column

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        reward = self.table.reward  # the trainer sets these on the functions it holds, the columns
        reward.group_size, reward.learning = self.group_size, self.learning
        return self.table.column(self.c, prompts, completions, kwargs)

    def check_run(self, run: Any) -> None:
        if self.c == 0:  # the term's own checks, once
            self.table.reward.check_run(run)

    def describe(self) -> str:
        return self.table.reward.describe() if self.c == 0 else f"column {self.c} of {self.table.reward.__name__}"


def expand_columns(
    funcs: list[Reward], names: list[str], weights: torch.Tensor
) -> tuple[list[Reward], list[str], torch.Tensor, list[int]]:
    """Terms ``[T]`` -> reward functions, names and weights per column ``[R]``, and each column's term index."""
    out_funcs: list[Reward] = []
    out_names: list[str] = []
    out_weights: list[float] = []
    owners: list[int] = []
    for t, (func, name, weight) in enumerate(zip(funcs, names, weights.tolist())):
        columns = func.output_columns()
        if columns is None:
            out_funcs.append(func)
            out_names.append(name)
            out_weights.append(weight)
            owners.append(t)
            continue
        if (
            func.stateful and func.state_dict()
        ) or func.is_group_reward:  # a state to save: it would be saved per column
            raise ConfigError(f"reward term {name!r}: a stateful or group reward cannot be split into columns.")
        total = sum(w for _, w in columns)
        if not columns or total <= 0:
            raise ConfigError(f"reward term {name!r}: its columns need a positive total weight, got {columns}.")
        table = ColumnTable(func)
        for c, (column, w) in enumerate(columns):
            out_funcs.append(RewardColumn(table, c, f"{name}/{column}"))
            out_names.append(f"{name}/{column}")
            out_weights.append(weight * w / total)
            owners.append(t)
    return out_funcs, out_names, torch.tensor(out_weights, dtype=torch.float32), owners
