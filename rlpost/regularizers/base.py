"""The regularizer base class and its registry: extra loss terms, and token selections of the policy loss.

A regularizer's ``__call__`` returns either a per-token term ``[B, T]`` (or ``[B, 1]``), added to the
per-token policy loss before the run's one aggregation (``algorithm.aggregation``), or a scalar ``[]``
that the regularizer has already reduced itself and that the trainer adds to the aggregated loss (TRL's
entropy bonus, a token mean of its own whatever the policy loss's normalization: ``entropy`` with
``reduce: token_mean``). ``policy_mask`` selects the tokens the policy loss trains (``top_entropy``).
"""

from __future__ import annotations

import torch

from rlpost.advantages.base import GroupBatch
from rlpost.core.activity import nonzero, share
from rlpost.core.component import Component
from rlpost.core.registry import Registry
from rlpost.losses.base import LossInputs


class Regularizer(Component):
    """Returns a term (already multiplied by its coefficient): per token ``[B, T]`` or reduced ``[]``; and metrics.

    Optional members: ``prepare``, ``policy_mask``, ``activity`` (below); ``sampler``, ``check_run``, ``describe``,
    ...: ``Component``.
    """

    def __call__(self, x: LossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """One micro-batch -> per-token term [B, T] (or [B, 1]), or an already reduced scalar [], and float metrics."""
        raise NotImplementedError

    def prepare(self, batch: GroupBatch) -> dict[str, torch.Tensor]:
        """At scoring time, on the whole gathered generation batch: per-completion tensors ``[N]`` that the
        trainer slices to this process and puts into the loss batch under their keys (``{}``: none)."""
        return {}

    def policy_mask(self, x: LossInputs) -> torch.Tensor | None:
        """At loss time, before any regularizer's ``__call__``: a 0/1 ``[B, T]`` mask of the tokens whose *policy*
        loss counts (the KL, the other regularizers and the aggregation's normalizer are untouched). The trainer
        multiplies every regularizer's mask into the policy loss and hands the product to the regularizers as
        ``x.policy_mask``. ``None`` (the default): every token."""
        return None

    def activity(self, x: LossInputs, term: torch.Tensor, selected: torch.Tensor | None) -> float | None:
        """``active/regularizer/<name>`` of one training micro-batch (rlpost/core/activity.py). The no-op is a zero
        term that selects every token: the figure is the share of counted tokens (``x.mask``) where the term is
        non-zero (beyond ATOL) or where this regularizer's own ``policy_mask`` (``selected`` [B, T], None: every
        token) leaves the token out of the policy loss. A term already reduced to a scalar [] has no tokens: a
        non-zero one reads 1.0 (every token's loss moved; its relative size would mean nothing next to a share),
        a zero one the share of tokens its mask leaves out (top_entropy). Only values the trainer has are read."""
        mask = x.mask
        dropped = torch.zeros_like(mask, dtype=torch.bool) if selected is None else selected.to(mask.dtype) == 0
        if term.dim() == 0:
            return 1.0 if bool(nonzero(term)) else share(dropped, mask)
        return share(nonzero(term).expand_as(mask) | dropped, mask)


REGULARIZERS: Registry[Regularizer] = Registry("regularizer", Regularizer)
