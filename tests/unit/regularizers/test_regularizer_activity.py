"""``Regularizer.activity`` by hand: the share of counted tokens with a non-zero term or left out of the policy loss
by the regularizer's own mask; a term already reduced to a scalar reads 1 when non-zero (rlpost/regularizers/base.py)."""

from __future__ import annotations

import torch

from rlpost.losses.base import LossInputs
from rlpost.regularizers.base import Regularizer


class Given(Regularizer):
    def __call__(self, x):
        raise NotImplementedError


def inputs(mask) -> LossInputs:
    mask = torch.tensor(mask)
    return LossInputs(
        logps=torch.zeros_like(mask), old_logps=torch.zeros_like(mask), advantages=torch.zeros(2, 1), mask=mask
    )


MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]  # five counted tokens


def test_share_of_tokens_with_a_non_zero_term():
    # non-zero: (0, 1) = 0.5 and (1, 2) = -2 (not counted); 1e-9 is below ATOL: 1 of 5
    term = torch.tensor([[0.0, 0.5, 0.0], [1e-9, 0.0, -2.0]])
    reg = Given(Given.Config())
    assert reg.activity(inputs(MASK), term, None) == 1 / 5
    # its own policy mask also drops (1, 0): 2 of 5
    assert reg.activity(inputs(MASK), term, torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])) == 2 / 5
    # a [B, 1] term counts on every token of its row: row 1 non-zero, 2 of 5
    assert reg.activity(inputs(MASK), torch.tensor([[0.0], [0.1]]), None) == 2 / 5
    assert reg.activity(inputs(MASK), torch.zeros(2, 3), None) == 0.0


def test_a_reduced_scalar_term():
    reg = Given(Given.Config())
    assert reg.activity(inputs(MASK), torch.tensor(0.3), None) == 1.0
    assert reg.activity(inputs(MASK), torch.tensor(0.0), None) == 0.0
    # top_entropy's shape: a zero scalar and a selection that keeps 3 of the 5 counted tokens
    keep = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    assert reg.activity(inputs(MASK), torch.tensor(0.0), keep) == 2 / 5
