"""The token-sum and local-token-mean aggregations on hand-worked numbers (rlpost/losses/aggregation.py)."""

import pytest
import torch

from rlpost.losses.aggregation import aggregate, describe_aggregation

L = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
M = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])


def test_token_sum_has_no_normalizer():
    # sum(l * m) = 1 + 2 + 4 = 7: no division by tokens (3), sequences (2), length (3) or grad_accum
    assert float(aggregate(L, M, "token-sum")) == 7.0
    assert float(aggregate(L, M, "token-sum", grad_accum=2)) == 7.0  # micro-batch sums add up over the step
    # two processes: DDP averages their gradients, so each scales its sum by 2 -> the step's total sum
    assert float(aggregate(L, M, "token-sum", num_processes=2)) == 14.0
    assert float(aggregate(torch.tensor([[2.0], [3.0]]), M, "token-sum")) == 2 * 2 + 3 * 1  # [B, 1] broadcast


def test_token_sum_micro_batches_sum_to_the_step_and_gradient_is_the_mask():
    loss = L.clone().requires_grad_(True)
    parts = sum(aggregate(loss[i : i + 1], M[i : i + 1], "token-sum", grad_accum=2) for i in (0, 1))
    assert float(parts.detach()) == 7.0
    parts.backward()
    assert torch.equal(loss.grad, M)  # d/dl of the plain sum: 1 on every counted token, whatever the length


def test_local_token_mean_is_trls_bnpo():
    # sum / count of this micro-batch: 7 / 3; / grad_accum 2 -> 7 / 6
    assert float(aggregate(L, M, "local-token-mean")) == pytest.approx(7 / 3)
    assert float(aggregate(L, M, "local-token-mean", grad_accum=2)) == pytest.approx(7 / 6)
    # micro-batches of 2 and 1 tokens: (3/2 + 4/1) / 2 = 2.75, not the step's token mean 7/3 (token-mean)
    parts = sum(float(aggregate(L[i : i + 1], M[i : i + 1], "local-token-mean", grad_accum=2)) for i in (0, 1))
    assert parts == pytest.approx(2.75)
    assert float(aggregate(L, torch.zeros_like(M), "local-token-mean")) == 0.0  # no token: 0, not NaN


def test_describe():
    assert "no length or batch normalization" in describe_aggregation("token-sum")
    assert "bnpo" in describe_aggregation("local-token-mean")
