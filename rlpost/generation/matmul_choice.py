"""``train.cpu_matmul=auto``: pick PyTorch's (``aten``) or oneDNN's fp32 matmul, and the decode steps' path,
by timing them here.

Which kernel is faster depends on the CPU, not on its vendor. On this project's 2-core AMD EPYC VM, MKL
runs its AVX2 path and oneDNN is ~2x faster (bench/RESULTS.md); on a 2-core Intel Xeon, MKL's ``mm``
reached 328 GFLOP/s against oneDNN's 291, and routing through oneDNN made a step slower (issue 23).
So ``auto`` measures, once per machine, the matmuls a step of this model actually runs:

- training: for every distinct linear weight ``W [N, K]`` of the policy, the forward ``x W^T`` and the
  two backward products (``dy W`` and ``dy^T x``) on ``train_rows`` rows;
- decode: ``x W^T`` on ``decode_rows`` rows (the generation batch): PyTorch's, oneDNN's with the weight
  packed once (as rlpost's generation runs it, ``onednn.packed_weights``), and with ``train.decode_kernel``
  rlpost's compiled kernel on its packed weight (rlpost/generation/skinny_matmul.py; built here first, where it can be).

Each product is timed as the best of ``REPEATS`` calls after one warm-up call (the minimum is the
estimate least disturbed by other work on a 2-core machine). A weight's time counts once per module
with its shape; the vocabulary projection is timed on its first ``MAX_COLUMNS`` rows and scaled (time
is linear in N). A step's estimate is ``training * step_rows / train_rows + decode * decode_steps``.

Each route's decode products take the kernel only where its decode time is at least ``MARGIN`` below the
route's own (PyTorch's on the ``aten`` route, oneDNN's packed weights on the ``onednn`` route): the kernel
does not depend on which library multiplies the training products, so a CPU where MKL wins those can still
decode through it. Each route's estimate counts the decode path it would take, and oneDNN is chosen only
when its estimate is at least ``MARGIN`` faster: within the noise, ``aten`` keeps TRL's own training numbers
bitwise (and its samples, unless the kernel decodes). ``MatmulTiming.decode`` is the chosen route's decode path.

The result is cached in ``$RLPOST_CACHE/cpu_matmul.json`` (``~/.cache/rlpost``), keyed by the CPU
model, the PyTorch version, the thread count and the weight shapes, so each new machine or model pays
the timing (well under a second for SmolLM2-135M) once. One process writes the file (``auto`` only
applies in a single process) through a temporary file and an atomic rename.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from rlpost.generation import onednn, skinny_matmul
from rlpost.generation.cpu_model import cpu_name

logger = logging.getLogger(__name__)

REPEATS = 3
MAX_COLUMNS = 4096  # the vocabulary projection (49k-152k rows) is timed on a slice and scaled
MARGIN = 0.05  # oneDNN must be 5% faster on the step estimate to be chosen


@dataclass(frozen=True)
class MatmulTiming:
    """Seconds per step estimate for each backend, and the choice they imply."""

    aten_s: float  # PyTorch's training products plus that route's decode path (its own, or the kernel)
    onednn_s: float  # oneDNN's training products plus that route's decode path (packed weights, or the kernel)
    choice: str  # "aten" | "onednn"
    cpu: str
    decode: str = "aten"  # the chosen route's decode products: "aten" | "onednn" (packed weights) | "kernel"
    kernel_decode_s: float | None = None  # the kernel's share of a step's decode, when it was timed
    onednn_decode_s: float | None = None  # oneDNN's packed weights', for comparison
    aten_decode_s: float | None = None  # PyTorch's, for comparison

    @property
    def speedup(self) -> float:
        """How many times faster oneDNN is than aten (below 1: slower)."""
        return self.aten_s / max(self.onednn_s, 1e-12)


def choose(aten_s: float, onednn_s: float, margin: float = MARGIN) -> str:
    """``onednn`` only when its time is at least ``margin`` below aten's, else ``aten``."""
    return "onednn" if onednn_s <= (1.0 - margin) * aten_s else "aten"


def weight_shapes(model: torch.nn.Module) -> Counter[tuple[int, int]]:
    """``{(N, K): count}`` over the model's fp32 ``nn.Linear`` weights (a tied head counts as a linear)."""
    shapes: Counter[tuple[int, int]] = Counter()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, torch.nn.Linear) and weight is not None and weight.dtype == torch.float32:
            shapes[(weight.size(0), weight.size(1))] += 1
    return shapes


def _best_of(fn: Callable[[], torch.Tensor]) -> float:
    fn()  # warm-up: oneDNN compiles a primitive per new shape
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _shape_times(n: int, k: int, train_rows: int, decode_rows: int, kernel: bool = False) -> dict[str, float]:
    """Seconds for one weight ``[n, k]``: training (forward + both backward products) and one decode
    product, per backend (with ``kernel`` also rlpost's decode kernel), scaled up when the weight was sliced
    to ``MAX_COLUMNS`` rows."""
    cols = min(n, MAX_COLUMNS)
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(cols, k, generator=gen)
    x, dy = torch.randn(train_rows, k, generator=gen), torch.randn(train_rows, cols, generator=gen)
    xd = torch.randn(decode_rows, k, generator=gen)
    packed = torch.ops.mkldnn._reorder_linear_weight(w, decode_rows)
    mm = onednn._matmul
    times = {
        "aten_train": _best_of(lambda: F.linear(x, w)) + _best_of(lambda: dy @ w) + _best_of(lambda: dy.t() @ x),
        "onednn_train": _best_of(lambda: mm(x, w))
        + _best_of(lambda: mm(dy, w.t()))
        + _best_of(lambda: mm(dy.t(), x.t())),
        "aten_decode": _best_of(lambda: F.linear(xd, w)),
        "onednn_decode": _best_of(lambda: mm(xd, packed)),
    }
    if kernel:
        kernel_packed = skinny_matmul.pack(w)
        times["kernel_decode"] = _best_of(lambda: skinny_matmul.linear(xd, kernel_packed, cols))
    return {key: value * n / cols for key, value in times.items()}


def measure(
    shapes: Counter[tuple[int, int]],
    step_rows: int,
    decode_rows: int,
    decode_steps: int,
    train_rows: int = 256,
    kernel: bool = False,
) -> MatmulTiming:
    """Time both backends on ``shapes`` and estimate one step: ``step_rows`` training rows (tokens scored
    with gradients) and ``decode_steps`` decode products of ``decode_rows`` rows; with ``kernel``, the
    oneDNN route's decode products through rlpost's kernel as well."""
    train_rows = max(1, min(train_rows, step_rows))
    total: dict[str, float] = {}
    for (n, k), count in shapes.items():
        for key, seconds in _shape_times(n, k, train_rows, decode_rows, kernel).items():
            total[key] = total.get(key, 0.0) + count * seconds
    scale = step_rows / train_rows
    kernel_decode = total["kernel_decode"] * decode_steps if kernel else None
    # each route: its training products plus its decode path (its own library's, or the kernel's)
    routes = {}
    for route in ("aten", "onednn"):
        decode, decode_s = route, total[f"{route}_decode"] * decode_steps
        if kernel_decode is not None and kernel_decode <= (1.0 - MARGIN) * decode_s:
            decode, decode_s = "kernel", kernel_decode
        routes[route] = (total[f"{route}_train"] * scale + decode_s, decode)
    (aten, aten_path), (fast, onednn_path) = routes["aten"], routes["onednn"]
    choice = choose(aten, fast)
    decode = onednn_path if choice == "onednn" else aten_path
    aten_decode, onednn_decode = total["aten_decode"] * decode_steps, total["onednn_decode"] * decode_steps
    return MatmulTiming(aten, fast, choice, cpu_name(), decode, kernel_decode, onednn_decode, aten_decode)


def _cache_file() -> Path:
    from rlpost.models.bundled import cache_dir  # where rlpost keeps per-machine files

    return cache_dir() / "cpu_matmul.json"


def _key(shapes: Counter[tuple[int, int]], step_rows: int, decode_rows: int, decode_steps: int, kernel: bool) -> str:
    dims = ",".join(f"{n}x{k}*{c}" for (n, k), c in sorted(shapes.items()))
    return (
        f"{cpu_name()}|torch {torch.__version__}|threads {torch.get_num_threads()}|{dims}"
        f"|rows {step_rows}/{decode_rows}x{decode_steps}|decode kernel {kernel} on either route"
    )


def auto_choice(
    model: torch.nn.Module, step_rows: int, decode_rows: int, decode_steps: int, kernel: bool = False
) -> MatmulTiming:
    """The cached or freshly measured choice for ``model``'s weights on this machine, logged once; ``kernel``
    (``train.decode_kernel``): time rlpost's decode kernel too, where it applies (``decode_rows`` within its
    row limit) and builds here."""
    kernel = kernel and decode_rows <= skinny_matmul.MAX_ROWS and skinny_matmul.available()
    shapes = weight_shapes(model)
    key, path = _key(shapes, step_rows, decode_rows, decode_steps, kernel), _cache_file()
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        timing = MatmulTiming(**cache[key])
        how = f"cached in {path}"
    else:
        timing = measure(shapes, step_rows, decode_rows, decode_steps, kernel=kernel)
        cache[key] = asdict(timing)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, indent=1, sort_keys=True))
        os.replace(tmp, path)
        how = "measured now"
    kernel_note = ""
    if timing.kernel_decode_s is not None:
        kernel_note = (
            f"; decode products through {timing.decode}: rlpost's kernel {timing.kernel_decode_s:.3f} s, "
            f"oneDNN's packed weights {timing.onednn_decode_s:.3f} s, aten {timing.aten_decode_s:.3f} s per step"
        )
    logger.info(
        "train.cpu_matmul=auto -> %s on %s: a step's fp32 matmuls take %.3f s through aten, %.3f s through "
        "oneDNN (%.2fx; %s)%s",
        timing.choice,
        timing.cpu,
        timing.aten_s,
        timing.onednn_s,
        timing.speedup,
        how,
        kernel_note,
    )
    return timing
