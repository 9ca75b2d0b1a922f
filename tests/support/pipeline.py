"""Hand-made inputs of the reward-to-advantage pipeline (rlpost/pipeline.py) for tests that need no model."""

from __future__ import annotations

import torch

from rlpost.pipeline import PipelineInputs


def pipeline_inputs(terms, g: int, kinds: list[str] | None = None, training: bool = True, length: int = 4):
    """Reward terms [N, R] (a tensor or nested lists), G -> PipelineInputs of N completions of ``length`` tokens
    each (every token counted), empty rows and completions."""
    terms = torch.as_tensor(terms, dtype=torch.float32)
    n = terms.size(0)
    mask = torch.ones(n, length)
    return PipelineInputs(
        reward_terms=terms,
        num_generations=g,
        completion_ids=torch.zeros(n, length, dtype=torch.long),
        completion_mask=mask,
        loss_mask=mask,
        lengths=torch.full((n,), length),
        max_completion_length=length,
        training=training,
        rows=[{}] * n,
        completions=[""] * n,
        kinds=kinds,
    )
