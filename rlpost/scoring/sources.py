"""The reward columns of a ``data=mixture`` run: each source's terms score its own rows only (rlpost/data/mixture.py).

The run's reward matrix ``[N, R]`` has one column per term of every source, named ``<source>/<term>`` (so TRL
logs ``rewards/<source>/<term>/mean``). A column is computed on the rows whose ``rlpost_source`` is its source
and is None (NaN) on every other row, which every combine reads as "this term does not apply" (a weighted sum
skips it): a row's reward is its own source's terms, weighted and combined by the run's ``reward.combine``. A
source whose terms all fail on a row leaves that row unscorable, as in a run of one source.

``scoped(term, source, rows, env)`` wraps one built term: it calls the term on its source's rows only (the lists
TRL passes, and every dataset column of one value per completion, cut to those rows; the cut lists are shared by
the source's terms, so a rubric's criterion columns still share one judging pass, rlpost/scoring/columns.py) and
puts None elsewhere. A group reward (rewards/group.py) is called even when the process holds none of its rows:
its cross-process gather must stay in step, and its groups stay whole because groups never mix sources. The
wrapper keeps the term's registry name, group and verifiable flags (its class is made per term class), its
state, columns and rollout fields; ``group_size`` and ``learning``, which the trainer sets on the run's
functions, reach the term for the call and are put back after it (held-out evaluation calls the term itself).
"""

from __future__ import annotations

from typing import Any

import torch

from rlpost.core.component import Component
from rlpost.data.mixture import SOURCE_COLUMN
from rlpost.rewards.base import Reward


class SourceRows:
    """The rows of one source in the batch in flight, shared by its terms (the cut lists keep their identity)."""

    def __init__(self, source: str):
        self.source = source
        self._inputs: tuple[list, list] | None = None
        self._cut: tuple[list[int], list, list] = ([], [], [])

    def select(self, prompts: list, completions: list, kwargs: dict[str, Any]) -> tuple[list[int], list, list]:
        """(this source's row indices [M], their prompts [M], their completions [M])."""
        if self._inputs is None or self._inputs[0] is not prompts or self._inputs[1] is not completions:
            labels = kwargs.get(SOURCE_COLUMN)
            if labels is None or len(labels) != len(completions):
                raise ValueError(f"a mixture's reward term got no {SOURCE_COLUMN} column to find its source's rows")
            index = [i for i, label in enumerate(labels) if label == self.source]
            self._inputs = (prompts, completions)
            self._cut = (index, [prompts[i] for i in index], [completions[i] for i in index])
        return self._cut


class ScopedReward(Reward):
    """A source's reward term on the whole batch: the term's scores on its source's rows, None elsewhere."""

    def __init__(self, inner: Reward, source: str, rows: SourceRows, env: Any = None):  # not registered: no Config
        Component.__init__(self, inner.cfg)
        self.inner, self.source, self.rows, self.env = inner, source, rows, env
        self.__name__ = f"{source}/{inner.__name__}"
        self.requires = inner.requires
        self.rollout_fields = inner.rollout_fields
        self.mean_weights = getattr(inner, "mean_weights", None)

    def policy_targets(self, prompt: Any, row: dict[str, Any]) -> list[tuple[Any, str]] | None:
        """The inner term's targets on its source's rows (none elsewhere)."""
        return self.inner.policy_targets(prompt, row) if row.get(SOURCE_COLUMN) == self.source else None

    def __call__(self, prompts: list, completions: list, **kwargs: Any) -> list[float | None]:
        n = len(completions)
        index, mine, theirs = self.rows.select(prompts, completions, kwargs)
        if not index and not self.inner.is_group_reward:
            return [None] * n
        if len(index) == n:  # the lists themselves: a multi-column term's siblings share them
            args = (prompts, completions, kwargs)
        else:
            cut = {k: [v[i] for i in index] if isinstance(v, (list, tuple)) and len(v) == n else v
                   for k, v in kwargs.items()}  # fmt: skip
            args = (mine, theirs, cut)
        inner, before = self.inner, (self.inner.group_size, self.inner.learning)
        inner.group_size, inner.learning = self.group_size, self.learning
        try:
            values = list(inner(prompts=args[0], completions=args[1], **args[2]))
        finally:
            inner.group_size, inner.learning = before
        if len(values) != len(index):
            raise ValueError(f"returned {len(values)} rewards for {len(index)} completions")
        out: list[float | None] = [None] * n
        for i, value in zip(index, values):
            out[i] = value
        return out

    def __reduce__(self):  # its class is made per term class: pickle through the factory (TRL's async workers)
        return (scoped, (self.inner, self.source, self.rows, self.env))

    def is_verifiable(self, env: Any = None) -> bool:
        return self.inner.is_verifiable(self.env)

    def data_columns(self) -> list[tuple[str, str]]:
        return self.inner.data_columns()

    def check_run(self, run: Any) -> None:
        """Nothing here: the builder checked the term against its own source (rlpost/build.py, ``build_mixture``)."""

    def describe(self) -> str:
        return f"{self.inner.describe()} (rows of source {self.source} only)"


class StatefulScopedReward(ScopedReward):
    """``ScopedReward`` of a stateful term: the term's state is saved and restored through it."""

    stateful = True

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.inner.load_state_dict(state)


_CLASSES: dict[type, type[ScopedReward]] = {}


def scoped(inner: Reward, source: str, rows: SourceRows, env: Any = None) -> ScopedReward:
    """``inner`` scoring ``source``'s rows only, as an instance of a class that keeps the term class's flags."""
    kind = type(inner)
    if kind not in _CLASSES:
        base = StatefulScopedReward if inner.stateful else ScopedReward
        name = f"Scoped{kind.__name__}"
        flags = {"registry_name": kind.registry_name, "is_group_reward": kind.is_group_reward,
                 "verifiable": kind.verifiable, "__module__": __name__, "__qualname__": name}  # fmt: skip
        _CLASSES[kind] = type(name, (base,), flags)
    return _CLASSES[kind](inner, source, rows, env)


def mixture_terms(sources: list[tuple[str, Any, Any]]) -> tuple[list[Reward], list[str], torch.Tensor, list[Any]]:
    """``[(source name, its environment or None, its RewardParts)]`` -> the run's reward functions, names
    ``<source>/<term>``, weights ``[R]`` and failure policies, source by source in order."""
    funcs: list[Reward] = []
    weights: list[torch.Tensor] = []
    failure: list[Any] = []
    for name, env, parts in sources:
        rows = SourceRows(name)
        funcs += [scoped(func, name, rows, env) for func in parts.funcs]
        weights.append(parts.weights)
        failure += list(parts.failure)
    return funcs, [f.__name__ for f in funcs], torch.cat(weights), failure
