"""``torch.multinomial(probs, 1)`` with its exponential draw's transform on every core, bitwise PyTorch's.

HF's sampling draws each next token with ``torch.multinomial(probs, num_samples=1)``, which PyTorch computes
as ``argmax(probs / q)`` with ``q ~ Exp(1)`` from a serial loop on one core: 7.7-9.7 ms per decode step for
SmolLM2's 8 x 49,152 probabilities on the 2-core AMD EPYC of bench/RESULTS.md, about a fifth of a fused decode
step. ``sampling.cpp`` draws the same random bits in the same order under the generator's lock and runs
PyTorch's own transform, the division and the argmax on PyTorch's threads: the same tokens, and the same
generator state after the call, bit for bit (tests/unit/generation/test_parallel_sampling.py).

``parallel_multinomial()`` swaps ``torch.multinomial`` within the block for ``multinomial``, which takes the
calls it computes identically (a contiguous fp32 CPU ``[B, V]`` input, one sample, the default generator, no
``out``) and hands every other call, and inputs PyTorch refuses (it then raises PyTorch's own error), to
PyTorch's function. Because every result is PyTorch's, the swap is invisible to other callers in the process.
It needs rlpost's compiled extension (rlpost/generation/skinny_matmul.py); rlpost's generation enters it with the decode
kernel (``train.decode_kernel``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from rlpost.generation import skinny_matmul

# What this module and sampling.cpp rely on in torch, in one place; tests/trainer/test_internals_contract.py pins
# each against the installed torch and fails on a patch, an ATen/c10 name or a torch header used but not declared.
# swapped process-wide within parallel_multinomial(); `multinomial` keeps torch's signature:
PATCHES = ("torch.multinomial",)
# the name sampling.cpp uses -> (its header under torch's include folder, the declaration there): the random bits and
# PyTorch's own transforms that make the draw bitwise torch.multinomial's one-sample path, argmax(probs / Exp(1))
CPP_INTERNALS = {
    "at::CPUGeneratorImpl": ("ATen/CPUGeneratorImpl.h", "struct TORCH_API CPUGeneratorImpl : public c10::GeneratorImpl"),
    "at::CPUGeneratorImpl::random64": ("ATen/CPUGeneratorImpl.h", "uint64_t random64();"),
    "c10::GeneratorImpl::mutex_": ("c10/core/GeneratorImpl.h", "std::mutex mutex_;"),
    "at::detail::getDefaultCPUGenerator": ("ATen/CPUGeneratorImpl.h", "const Generator& getDefaultCPUGenerator();"),
    "at::get_generator_or_default": ("ATen/core/Generator.h", "inline T* get_generator_or_default("),
    "at::transformation::uniform_real": ("ATen/core/TransformationHelper.h", "dist_acctype<T> uniform_real(V val, T from, T to)"),
    "at::transformation::exponential": ("ATen/core/TransformationHelper.h", "inline T exponential(T val, T lambda)"),
}  # fmt: skip

_TORCH_MULTINOMIAL = torch.multinomial


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):  # noqa: A002 (torch's names)
    """``torch.multinomial``'s signature and results; one sample from fp32 ``[B, V]`` on every core."""
    if (
        num_samples == 1
        and generator is None
        and out is None
        and isinstance(input, torch.Tensor)
        and input.dim() == 2
        and input.dtype == torch.float32
        and input.device.type == "cpu"
        and input.is_contiguous()
        and not input.requires_grad
    ):
        drawn = skinny_matmul._extension().multinomial_one(input)
        if drawn.size(0) == input.size(0):
            return drawn
    return _TORCH_MULTINOMIAL(input, num_samples, replacement, generator=generator, out=out)


@contextmanager
def parallel_multinomial() -> Iterator[None]:
    """Within the block, ``torch.multinomial`` is ``multinomial`` (module docstring). Call only where
    ``skinny_matmul.available()``."""
    previous = torch.multinomial
    torch.multinomial = multinomial
    try:
        yield
    finally:
        torch.multinomial = previous
