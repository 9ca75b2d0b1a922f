"""How far one decode step is from the memory-bandwidth bound, and where the rest of its time goes.

A decode step of a GRPO generation batch reads every weight of the model once (the tied head once; the
embedding lookup reads only its rows) and each row's KV cache: ``bytes = 4 * params + rows * context *
2 * layers * kv_heads * head_dim * 4`` in fp32. At the machine's memory bandwidth (a STREAM-like copy,
``harness.memory_bandwidth_gbs``) that takes ``bytes / bandwidth``: no decode step can be faster. This
script measures, for SmolLM2-135M in fp32 with ``rows`` rows at a context of ``--context`` positions:

- ``step``: a decode loop of ``--steps`` single-token forwards (``logits_to_keep=1``) after a prefill of
  ``--context`` positions, the KV cache growing as in generation, per step; PyTorch's linears,
  oneDNN's (weights packed once: rlpost/generation/onednn.py) and, up to 16 rows, rlpost's decode kernel
  (``train.decode_kernel``, rlpost/generation/skinny_matmul.py) and rlpost's fused step (``train.fused_decode``:
  one compiled call per decoder layer on the kernel's products, the preallocated cache,
  rlpost/generation/fused_decode.py), median of ``--reps`` loops;
- ``linears only``: the same step's matrix products alone (every ``nn.Linear`` and the head on a
  ``[rows, K]`` input, back to back): the floor the kernels set at this row count;
- ``read weights``: summing every weight tensor (a pure read of the same bytes, no arithmetic to speak of);
- ``bound``: ``bytes / bandwidth``, and the fraction of it each of the above reaches.

Then the top operators of one profiled decode loop (rlpost's default path: the kernel where it applies). Rows vary (1, 8, 32, 64): the weight bytes are read once per
step whatever the row count, so more rows per decode step (across prompts) is what moves a step toward
the bound per generated token.

Usage: .venv/bin/python bench/decode_bound.py [--rows 1,8,32,64] [--context 48] [--steps 32] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import memory_bandwidth_gbs  # noqa: E402


def median_time(fn, reps: int) -> float:
    """Median seconds of ``reps`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def decode_loop(model, ids: torch.Tensor, steps: int, reps: int, preallocated: bool = False) -> float:
    """Median seconds per decode step over ``reps`` loops of ``steps`` single-token forwards, each loop
    after a fresh (untimed) prefill of ``ids [rows, context]``: the KV cache grows as in generation (HF's
    dynamic cache, or rlpost's preallocated one: what the fused step writes into)."""
    from transformers import DynamicCache

    from rlpost.generation.kv_cache import PreallocatedCache

    rows, context = ids.shape
    token = ids[:, -1:]
    times = []
    for _ in range(reps + 1):  # the first loop warms up
        cache = PreallocatedCache(context + steps) if preallocated else DynamicCache()
        model(input_ids=ids, past_key_values=cache, logits_to_keep=1)
        t = time.perf_counter()
        for k in range(steps):
            position = torch.full((rows, 1), context + k)
            model(input_ids=token, position_ids=position, past_key_values=cache, logits_to_keep=1)
        times.append((time.perf_counter() - t) / steps)
    return statistics.median(times[1:])


def products(pairs) -> None:
    """``x @ W^T`` through oneDNN for each (input, packed weight) pair: a decode step's linears alone."""
    from rlpost.generation import onednn

    for x, packed in pairs:
        onednn._matmul(x, packed)


def pct(bound: float, seconds: float) -> str:
    """``bound`` as a percentage of ``seconds`` ("-" where a setting did not run: NaN)."""
    return f"{100 * bound / seconds:.0f}%" if seconds == seconds else "-"


def kernel_products(triples) -> None:
    """The same through rlpost's decode kernel, for each (input, kernel-packed weight, N) triple."""
    from rlpost.generation import skinny_matmul

    for x, packed, n in triples:
        skinny_matmul.linear(x, packed, n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", default="1,8,32,64", help="decode batch sizes")
    p.add_argument("--context", type=int, default=48, help="prompt positions per row (the default prompts: ~45)")
    p.add_argument("--reps", type=int, default=5, help="timed decode loops per setting")
    p.add_argument("--steps", type=int, default=32, help="decode steps per loop")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--profile-rows", type=int, default=8, help="rows of the profiled step (0: none)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.generation import onednn, skinny_matmul
    from rlpost.generation.fused_decode import fused_decoding
    from rlpost.models.loading import load_model

    run = build_run(compose([]))
    model = load_model(run.model).eval()
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    kv_per_position = 4 * 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim
    weight_bytes = 4 * sum(p.numel() for p in model.parameters())
    linears = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if model.lm_head.weight is model.model.embed_tokens.weight:  # tied: the head is a linear over it
        linears = [w for w in linears if w is not model.lm_head.weight] + [model.lm_head.weight]
    bandwidth = memory_bandwidth_gbs(args.threads)
    print(
        f"SmolLM2-135M fp32: {weight_bytes / 1e6:.0f} MB of weights, {kv_per_position / 1e3:.1f} kB of KV cache per "
        f"cached position; copy bandwidth {bandwidth:.1f} GB/s; {torch.get_num_threads()} threads; "
        f"context {args.context}\n"
    )
    print(
        "| rows | bound ms | step ms (aten) | step ms (oneDNN packed) | step ms (rlpost kernel) | step ms (fused) "
        "| linears only ms (oneDNN) | linears only ms (kernel) | read weights ms | % of bound: step (oneDNN) "
        "| step (kernel) | step (fused) | linears only (oneDNN) | linears only (kernel) | read weights "
        "| tok/s at the fastest step |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    kernel = skinny_matmul.available()
    if not kernel:
        print(f"(rlpost's decode kernel is not available here: {skinny_matmul.unavailable_reason()})")
    read_s = median_time(lambda: [w.sum() for w in model.parameters()], args.reps)
    for rows in (int(r) for r in args.rows.split(",")):
        ids = torch.randint(0, config.vocab_size, (rows, args.context))
        aten_s = decode_loop(model, ids, args.steps, args.reps)
        onednn.use_onednn_linears(model)
        x = {w.shape[1]: torch.randn(rows, w.shape[1]) for w in linears}
        try:
            with onednn.packed_weights(model, rows):
                onednn_s = decode_loop(model, ids, args.steps, args.reps)
            packed = [torch.ops.mkldnn._reorder_linear_weight(w.detach(), rows) for w in linears]  # as in generation
            linear_s = median_time(
                partial(products, [(x[w.shape[1]], pw) for w, pw in zip(linears, packed)]), args.reps
            )
            kernel_s = kernel_linear_s = fused_s = float("nan")
            if kernel and rows <= skinny_matmul.MAX_ROWS:
                with skinny_matmul.decode_weights(model) as kernel_packed:  # the prefill on the routed oneDNN linears
                    kernel_s = decode_loop(model, ids, args.steps, args.reps)
                    with fused_decoding(model, kernel_packed):
                        fused_s = decode_loop(model, ids, args.steps, args.reps, preallocated=True)
                triples = [(x[w.shape[1]], skinny_matmul.pack(w), w.shape[0]) for w in linears]
                kernel_linear_s = median_time(partial(kernel_products, triples), args.reps)
        finally:
            for module in model.modules():
                module.__dict__.pop("forward", None)
        context = args.context + args.steps / 2  # mean cached positions over the loop
        bound = (weight_bytes + rows * context * kv_per_position) / (bandwidth * 1e9)
        fastest = min(s for s in (onednn_s, kernel_s, fused_s) if s == s)  # NaN where the kernel did not run

        print(
            f"| {rows} | {1e3 * bound:.1f} | {1e3 * aten_s:.1f} | {1e3 * onednn_s:.1f} | {1e3 * kernel_s:.1f} | "
            f"{1e3 * fused_s:.1f} | {1e3 * linear_s:.1f} | {1e3 * kernel_linear_s:.1f} | {1e3 * read_s:.1f} | "
            f"{pct(bound, onednn_s)} | {pct(bound, kernel_s)} | {pct(bound, fused_s)} | {pct(bound, linear_s)} | "
            f"{pct(bound, kernel_linear_s)} | {pct(bound, read_s)} | {rows / fastest:.0f} |",
            flush=True,
        )
        if rows == args.profile_rows:
            onednn.use_onednn_linears(model)
            kernel_linear = skinny_matmul.linear

            def labelled(*a, _linear=kernel_linear, **kw):  # the kernel is no torch op: name it in the profile
                with torch.profiler.record_function("rlpost::skinny_matmul"):
                    return _linear(*a, **kw)

            skinny_matmul.linear = labelled
            try:
                use_kernel = kernel and rows <= skinny_matmul.MAX_ROWS
                weights = skinny_matmul.decode_weights(model) if use_kernel else onednn.packed_weights(model, rows)
                with weights, torch.profiler.profile() as prof:
                    decode_loop(model, ids, args.steps, 1)
            finally:
                skinny_matmul.linear = kernel_linear
                for module in model.modules():
                    module.__dict__.pop("forward", None)
            profile = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    if args.profile_rows:
        print(
            f"\nTop operators of 2 decode loops ({args.steps} steps each, with their prefills) at {args.profile_rows} rows "
            f"({'rlpost kernel' if kernel else 'oneDNN packed'}):\n\n```\n{profile}\n```"
        )


if __name__ == "__main__":
    with torch.inference_mode():
        main()
