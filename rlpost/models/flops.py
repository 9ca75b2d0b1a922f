"""``train_flops``: a model-FLOPs estimate of what a run has computed so far, for compute-matched curves.

The standard dense-transformer count (Kaplan et al. 2020): a forward pass costs 2 N FLOPs per token
and a forward plus backward 6 N, with N the model's parameters (the tied LM head counted once, as the
output projection it is; attention's sequence-length term left out, ~L / (6 d_model) of the matmuls).
Per token a training step then costs, over the prompt and completion tokens it generated (TRL's
``num_tokens``):

    flops_per_token = 2 N (generation)  +  6 N x num_iterations (policy forward + backward)
                    + 2 N (reference forward, when the run loads a reference model)

A refill round's tokens (DAPO) count as generated and trained; a prefix shared by a group is counted
once per completion, as TRL counts its tokens. It is an estimate to put methods on one axis, not a
profile: bench/ measures real time.
"""

from __future__ import annotations

import torch


def model_parameters(model: torch.nn.Module) -> int:
    """N: the distinct parameters (a tied embedding / LM head once)."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def flops_per_token(parameters: int, num_iterations: int, reference: bool) -> float:
    """Model FLOPs per generated-batch token of one training step (module docstring)."""
    return float(parameters) * (2 + 6 * num_iterations + (2 if reference else 0))
