"""rlpost/generation/parallel_sampling.py: torch.multinomial(probs, 1) with the draw's transform on every core gives
PyTorch's samples and leaves the generator where PyTorch leaves it, bit for bit, and hands everything else
to PyTorch."""

from __future__ import annotations

import pytest
import torch

from rlpost.generation import parallel_sampling, skinny_matmul

from support.trainer import make_run, rlpost_trainer

pytestmark = pytest.mark.skipif(
    not skinny_matmul.available(), reason=f"rlpost's extension cannot run here: {skinny_matmul.unavailable_reason()}"
)


def _draw_both(probs: torch.Tensor, seed: int, **kwargs):
    """(PyTorch's sample, its next 4 uniforms), then the same for ours, from the same seed."""
    results = []
    for draw in (torch.multinomial, parallel_sampling.multinomial):
        torch.manual_seed(seed)
        results.append((draw(probs, 1, **kwargs), torch.rand(4)))
    return results


@pytest.mark.parametrize("shape", [(1, 7), (3, 1000), (8, 49152), (16, 333), (5, 3)])
def test_same_samples_and_generator_state_as_torch(shape):
    gen = torch.Generator().manual_seed(shape[1])
    for seed in range(12):
        probs = torch.softmax(3 * torch.randn(*shape, generator=gen), dim=-1)
        probs[:, ::3] = 0.0  # tokens a top-k or top-p filter removed
        (theirs, after_theirs), (ours, after_ours) = _draw_both(probs, seed)
        assert ours.dtype == torch.long and ours.shape == (shape[0], 1)
        assert torch.equal(ours, theirs) and torch.equal(after_ours, after_theirs)


def test_a_certain_token_is_always_drawn():
    probs = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])  # unnormalised, as torch allows
    assert parallel_sampling.multinomial(probs, 1).tolist() == [[1], [2]]


def test_other_calls_and_refused_inputs_go_to_torch():
    probs = torch.softmax(torch.randn(4, 50), dim=-1)
    for kwargs in (dict(num_samples=3), dict(num_samples=2, replacement=True)):
        torch.manual_seed(0)
        theirs = torch.multinomial(probs, **kwargs)
        torch.manual_seed(0)
        assert torch.equal(parallel_sampling.multinomial(probs, **kwargs), theirs)
    for odd in (probs.double(), probs[0], probs.t().contiguous().t()):  # float64, 1-D, not contiguous
        torch.manual_seed(0)
        theirs = torch.multinomial(odd, 1)
        torch.manual_seed(0)
        assert torch.equal(parallel_sampling.multinomial(odd, 1), theirs)
    generator = torch.Generator().manual_seed(5)
    theirs = torch.multinomial(probs, 1, generator=torch.Generator().manual_seed(5))
    assert torch.equal(parallel_sampling.multinomial(probs, 1, generator=generator), theirs)
    bad = probs.clone()
    bad[1, 3] = float("nan")
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        parallel_sampling.multinomial(bad, 1)
    zero = probs.clone()
    zero[2] = 0.0
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
        parallel_sampling.multinomial(zero, 1)


def test_the_swap_lasts_for_the_block_and_the_trainers_generation_enters_it(tmp_path):
    plain = torch.multinomial
    with parallel_sampling.parallel_multinomial():
        assert torch.multinomial is parallel_sampling.multinomial
    assert torch.multinomial is plain
    trainer = rlpost_trainer(make_run(["train.cpu_matmul=onednn"]), tmp_path / "a")
    with trainer._generation_context(4):
        assert torch.multinomial is parallel_sampling.multinomial
    assert torch.multinomial is plain
    aten = rlpost_trainer(make_run(["train.cpu_matmul=aten"]), tmp_path / "b")  # TRL's computation: PyTorch's
    with aten._generation_context(4):
        assert torch.multinomial is plain
