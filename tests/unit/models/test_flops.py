"""train_flops (rlpost/models/flops.py): the per-token count by hand, tied weights counted once."""

from __future__ import annotations

import torch

from rlpost.models.flops import flops_per_token, model_parameters


def test_flops_per_token_by_hand():
    # N = 100: generation 2N + policy forward/backward 6N per pass (+ 2N for a reference forward)
    assert flops_per_token(100, 1, False) == 800.0  # 100 * (2 + 6)
    assert flops_per_token(100, 2, True) == 1600.0  # 100 * (2 + 12 + 2)


def test_tied_parameters_count_once():
    embed = torch.nn.Embedding(10, 4)  # 40
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = embed.weight  # tied LM head: the same 40 weights
    model = torch.nn.ModuleDict({"embed": embed, "head": head, "mlp": torch.nn.Linear(4, 4)})  # 16 + 4
    assert model_parameters(model) == 40 + 20
