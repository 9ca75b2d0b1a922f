"""fp32 products of a decode step's few rows with rlpost's own compiled CPU kernel (``train.decode_kernel``).

A decode step multiplies 8 rows by every weight of the model. At that shape the product is a stream of the
weights from memory, and PyTorch's kernels stream them at half the rate a plain read reaches: on this
project's 2-core AMD EPYC (AVX-512), every linear of a SmolLM2 decode step takes 27-29 ms through oneDNN's
packed weights against 14-18 ms to read those 538 MB once (bench/RESULTS.md). ``skinny_matmul.cpp`` packs
each weight once into column blocks stored k-major, so a block is one sequential stream, and keeps the
rows' M x BLOCK accumulators in registers; it runs at the plain read's rate (bench/RESULTS.md).

The kernel is compiled on first use for the host's instruction set (``-march=native``: AVX-512 or AVX2 with
FMA) by ``torch.utils.cpp_extension`` into ``$RLPOST_CACHE/kernels`` (``~/.cache/rlpost``), under a name
that hashes the source, the CPU's model and flags and the PyTorch version; about 25 s once per machine, then a load.
One process compiles while others wait, under an OS file lock (``filelock``, released when its holder dies):
PyTorch's own build lock is a plain file that a process killed mid-build leaves behind, and every later process
would then wait on it forever, so it is removed while the OS lock is held (nobody else can be building then). The
same extension holds rlpost's other
decode-time code: a whole decoder layer of a decode step (``decode_layer.cpp``, rlpost/generation/fused_decode.py) and
``torch.multinomial``'s one-sample draw on every core (``sampling.cpp``, rlpost/generation/parallel_sampling.py). Where there is no C++ compiler, no AVX2,
or the build or its check against ``F.linear`` fails, ``available()`` is False with the reason logged once,
and decode products stay on the layers' own matmuls (oneDNN's packed weights or PyTorch's).

``decode_weights(model)`` is how generation uses it: within the block, every fp32 ``nn.Linear`` multiplies
inputs of at most ``MAX_ROWS`` rows through the kernel, and longer ones (the prefill) through its own forward,
oneDNN's where ``train.cpu_matmul`` routed it (rlpost/generation/onednn.py), PyTorch's where it did not. The kernel does
not depend on that route: on a CPU where MKL's ``mm`` wins the training products, the decode steps can still
stream the weights through the kernel (``train.cpu_matmul=auto`` times both, rlpost/generation/matmul_choice.py).

The sums run over k in order with one fused multiply-add per term: equal to ``F.linear`` to float rounding
(about 1e-6 relative), not bitwise, like oneDNN (tests/unit/generation/test_skinny_matmul.py).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from rlpost.generation.cpu_model import cpu_flags, cpu_name

logger = logging.getLogger(__name__)

SOURCES = [Path(__file__).with_name(name) for name in ("skinny_matmul.cpp", "decode_layer.cpp", "sampling.cpp")]
HEADER = Path(__file__).with_name("skinny_matmul.h")
MAX_ROWS = 16  # most rows per call (skinny_matmul.cpp); more rows go to the layer's own forward

# What this module relies on in torch (tests/trainer/test_internals_contract.py pins each against the installed torch):
PATCHES = ("torch.nn.Linear.forward",)  # an instance attribute of each fp32 linear within decode_weights()
# ATen names the C++ sources use besides torch/extension.h's public API -> (header, the declaration there);
# sampling.cpp's generator internals are declared next to its Python side (parallel_sampling.CPP_INTERNALS)
CPP_INTERNALS = {
    "at::parallel_for": ("ATen/Parallel.h", "inline void parallel_for("),
    "at::get_num_threads": ("ATen/Parallel.h", "TORCH_API int get_num_threads();"),
}


def build_dir() -> Path:
    """``$RLPOST_CACHE/kernels/rlpost_skinny_matmul_<digest>``: the build folder of this source on this machine."""
    from rlpost.models.bundled import cache_dir

    # -march=native code runs only where its instructions exist: the build is keyed by the CPU's flags too
    code = "".join(path.read_text() for path in [*SOURCES, HEADER])
    key = f"{code}|{cpu_name()}|{cpu_flags()}|{torch.__version__}"
    return cache_dir() / "kernels" / f"rlpost_skinny_matmul_{hashlib.sha1(key.encode()).hexdigest()[:12]}"


def _build() -> ModuleType:
    """Compile (or load the cached build of) the extension for this machine."""
    import ninja
    from filelock import FileLock
    from torch.utils.cpp_extension import load

    from rlpost.runs.rundir import write_atomic

    build = build_dir()
    name = build.name
    build.mkdir(parents=True, exist_ok=True)
    # compiled from copies in the build folder: the sources' paths are part of ninja's build file, so a checkout
    # and an installed rlpost (same code, other folders) would otherwise rebuild over each other's build
    for source in [*SOURCES, HEADER]:
        copy = build / source.name
        if not copy.is_file() or copy.read_text() != source.read_text():
            write_atomic(copy, source.read_text())
    flags = ["-O3", "-march=native", "-fopenmp"]
    path = os.environ.get("PATH", "")
    os.environ["PATH"] = os.pathsep.join([ninja.BIN_DIR, path])  # the ninja wheel's binary, venv not activated
    try:
        with FileLock(str(build / "rlpost.lock")):  # the OS releases it if its holder dies
            clear_stale_baton(build)
            return load(
                name,
                [str(build / path.name) for path in SOURCES],
                extra_cflags=flags,
                extra_ldflags=["-fopenmp"],
                build_directory=str(build),
            )
    finally:
        os.environ["PATH"] = path


def clear_stale_baton(build: Path) -> bool:
    """Remove PyTorch's build lock (``<build>/lock``) left by a process killed while compiling; call it only while
    holding the OS lock around the build, when no live process can hold the baton. True if one was removed."""
    baton = build / "lock"
    if not baton.exists():
        return False
    logger.warning("removing a stale build lock left by an interrupted kernel build: %s", baton)
    baton.unlink(missing_ok=True)
    return True


def unavailable_reason() -> str | None:
    """Why the kernel cannot run here (None: it can). Builds it on the first call."""
    return _load()[1]


def available() -> bool:
    """The kernel is built for this machine and agrees with ``F.linear``."""
    return _load()[0] is not None


@functools.cache
def _load() -> tuple[ModuleType | None, str | None]:
    capability = torch.backends.cpu.get_cpu_capability()
    reason: str | None
    if capability not in ("AVX2", "AVX512"):
        reason = f"the CPU's vector capability is {capability}, the kernel needs AVX2 or AVX512"
    elif not Path("/proc/cpuinfo").exists():
        reason = "not a Linux machine"
    elif not shutil.which("c++"):
        reason = "no C++ compiler (c++) on PATH"
    else:
        try:
            extension = _build()
            reason = _check(extension)
        except Exception as error:  # a failed build or load: oneDNN keeps the decode products
            extension, reason = None, f"the build failed: {type(error).__name__}: {str(error)[-400:]}"
        if reason is None:
            return extension, None
    logger.info("train.decode_kernel: not used (%s); decode products stay on the layers' own matmuls", reason)
    return None, reason


def _check(extension: ModuleType) -> str | None:
    """Every row count on a shape with a partial last block, against ``F.linear``."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(extension.block() * 2 + 5, 37, generator=gen)
    packed = extension.pack(weight)
    for rows in range(1, MAX_ROWS + 1):
        x = torch.randn(rows, 37, generator=gen)
        if not torch.allclose(extension.matmul(x, packed, weight.size(0)), F.linear(x, weight), atol=1e-5):
            return f"its product differs from F.linear at {rows} rows"
    return None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight [N, K]`` (fp32, CPU) -> ``[ceil(N / BLOCK), K, BLOCK]``, the kernel's layout (a copy)."""
    return _extension().pack(weight.detach().contiguous())


def linear(x: torch.Tensor, packed: torch.Tensor, n: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x [..., K] @ W^T (+ bias [N])`` -> ``[..., n]`` from ``packed = pack(W)``; at most ``MAX_ROWS`` rows."""
    flat = x.reshape(-1, x.size(-1)).contiguous()
    out = _extension().matmul(flat, packed, n)
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], n)


def applies(rows: int) -> bool:
    """The kernel can take a generation of ``rows`` rows here (within ``MAX_ROWS``, and built)."""
    return 0 < rows <= MAX_ROWS and available()


def _forward(
    packed: torch.Tensor,
    n: int,
    bias: torch.Tensor | None,
    own: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
) -> torch.Tensor:
    rows = x.numel() // max(x.size(-1), 1)
    if 0 < rows <= MAX_ROWS and x.dtype == torch.float32:
        return linear(x, packed, n, bias)
    return own(x)  # the prefill's many rows: the layer's own forward


@contextmanager
def decode_weights(model: torch.nn.Module) -> Iterator[dict[torch.nn.Module, torch.Tensor]]:
    """Within the block (inference only), every fp32 CPU ``nn.Linear`` of ``model`` multiplies inputs of at most
    ``MAX_ROWS`` rows through the kernel on a packed copy of its weight, and longer inputs through its own
    forward. Yields the layers it took over with their packed weights (what rlpost/generation/fused_decode.py runs whole
    layers on); the packed copies (one model's worth of memory) are dropped and the forwards restored on exit.
    Call only where ``available()``."""
    swapped, packed = [], {}
    with torch.no_grad():
        for module in model.modules():
            if not isinstance(module, torch.nn.Linear) or type(module) is not torch.nn.Linear:
                continue  # subclasses (LoRA's, quantized ones) keep their own forward
            weight = module.weight
            if weight.dtype == torch.float32 and weight.device.type == "cpu":
                instance_forward = module.__dict__.get(
                    "forward"
                )  # oneDNN's route sets one (rlpost/generation/onednn.py)
                packed[module] = pack(weight)
                module.forward = partial(_forward, packed[module], weight.size(0), module.bias, module.forward)
                swapped.append((module, instance_forward))
    try:
        yield packed
    finally:
        for module, instance_forward in swapped:
            if instance_forward is None:
                del module.forward  # back to nn.Linear's own
            else:
                module.forward = instance_forward


def _extension() -> ModuleType:
    extension, reason = _load()
    if extension is None:
        raise RuntimeError(f"rlpost's decode kernel is not available here: {reason}")
    return extension
