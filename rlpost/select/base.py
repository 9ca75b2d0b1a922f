"""The selection base class and its registry: which trajectories of a generation batch the update uses.

A selector runs in the pipeline's keep stage (rlpost/pipeline.py, step 3.6), after the advantages: it
returns a 0/1 mask [N] over the batch. Rows it drops stay in their groups' baselines (the advantages
were computed on every sampled trajectory) but leave the loss, as dynamic sampling's dropped groups do.
Sample more than the update uses (``train.completions_per_step``) and let the selector spend the budget.
"""

from __future__ import annotations

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.core.activity import share
from rlpost.core.component import Component
from rlpost.core.registry import Registry


class Selector(Component):
    """Returns keep [N] (1.0 = in the update) and metrics; training batches only (evaluation keeps all).

    Optional members: ``activity`` (below); ``check_run``, ``state_dict``, ``describe``, ...: ``Component``.
    """

    def __call__(self, batch: GroupBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """A generation batch (gathered) -> keep [N] float and float metrics."""
        raise NotImplementedError

    def activity(self, keep: torch.Tensor) -> float | None:
        """``active/select/<name>`` of one training batch (rlpost/core/activity.py). The no-op keeps every row: the
        figure is the share of rows this selector's ``keep`` [N] (what ``__call__`` returned) leaves out of the
        update (dynamic sampling's drops are not its own: ``active/keep/dynamic_sampling``)."""
        return share(keep < 0.5)


SELECTORS: Registry[Selector] = Registry("selector", Selector)
