"""The one state object of a generation batch: what rlpost learns about it between TRL's call sites.

TRL's ``_generate_and_score_completions`` calls ``_generate`` and ``_calculate_rewards`` itself, and
hands its output dict to the loss. rlpost's seams (rlpost/trainer/) fill one ``GenerationBatch`` as
they run instead of parking values on the trainer: stage 1c the rollouts, stage 2 the reward matrix,
stage 3 the pipeline's result (rlpost/pipeline.py). A new one starts with every generation batch, so
nothing of an earlier batch can be read by mistake. A trainer subclass keeps its per-batch values here
too (UG-TTT's adapter of each row), never as attributes of the trainer.

``LossPass`` is the same for one loss micro-batch (stage 5): ``LossSeams._compute_loss`` holds one in
``trainer.loss_pass`` for the duration of the call (PPO's values of the loss's policy forward). It is not
part of ``GenerationBatch``: a resumed run trains on TRL's restored buffer before any batch is generated.

Shapes: B = this process's completions, N = all processes' (gathered), R = reward terms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from rlpost.pipeline import PipelineResult


@dataclass
class GenerationBatch:
    """One generation batch as rlpost sees it (this process's rows unless a field says gathered)."""

    rows: list[dict[str, Any]]  # [B] the dataset rows, in generation order
    prompts: list = field(default_factory=list)  # [B] as the reward functions saw them
    completions: list = field(default_factory=list)  # [B] decoded (text, or messages when conversational)
    lengths: list[int] = field(default_factory=list)  # [B] completion tokens the policy generated
    truncated: list[bool] = field(default_factory=list)  # [B] no EOS within max_completion_length
    kinds: list[str] | None = None  # [B] the rollout strategy's kind per row (None: plain sampling)
    turn_rows: list[int] | None = None  # [M] the rows of the episode turn being generated (None: all B in order)
    all_kinds: list[str] | None = None  # [N] ``kinds`` gathered over processes (stage 3)
    reward_terms: torch.Tensor | None = None  # [N, R] every reward term, unweighted, gathered
    result: PipelineResult | None = None  # rewards -> advantages (stage 3)
    # [B] UG-TTT (rlpost/algorithms/ug_ttt.py): the LoRA adapter each row samples and is scored with while the batch
    # is generated and scored; None: the ensemble mean (evaluation batches, every other trainer)
    adapters: torch.Tensor | None = None

    def record_rollouts(self, prompts: list, completions: list, completion_ids: list[list[int]], stop_ids: set[int]):
        """Stage 1c: what generation produced; a completion is truncated when it does not end in a stop id."""
        self.prompts, self.completions = prompts, completions
        self.lengths = [len(ids) for ids in completion_ids]
        self.truncated = [len(ids) == 0 or ids[-1] not in stop_ids for ids in completion_ids]


@dataclass
class LossPass:
    """One loss micro-batch in flight (stage 5), held in ``trainer.loss_pass`` while ``_compute_loss`` runs."""

    inputs: dict[str, Any]  # the micro-batch: TRL's loss batch slice (keys: rlpost/losses/base.py)
    values: torch.Tensor | None = None  # [B, T] PPO: the critic's values, computed with the loss's policy forward
