"""Per-step cost of the gradient transforms (trusted_projection, direction_monitor) on SmolLM2-135M.

Method. SmolLM2-135M-Instruct (``rlpost.models.loading.load_model(ModelConfig())``, fp32, full fine-tuning
unless ``--lora``) gets real gradients from one forward/backward on a random batch of
``--batch`` x ``--tokens`` tokens (the shape of the default recipe's step: 8 completions of about
40 prompt + 32 new tokens); that forward/backward is timed too, as a lower bound of a training step
(a real step also generates). The baseline is one ``torch.optim.AdamW`` step on those gradients.
Each transform is built with ``source=warmup, warmup_steps=1``: a first call snapshots the weights
(timed: "snapshot"), one AdamW step moves them, the second call builds the subspace (timed:
"build", once per run) and then every later call is what a training step pays (median of
``--reps`` calls after one warm-up call). ``ratio`` = (AdamW step + transform) / AdamW step;
``vs fwd+bwd+step`` = the same with the forward/backward added to both sides.

On a shared machine, use ``--threads 1``: with more torch threads than free cores every small
kernel waits for its sleeping sibling threads (about 15 ms per op here at load 6 on 2 cores), which
measures the scheduler, not the method; the per-matrix loops of the transforms suffer most.

Usage: .venv/bin/python bench/grad_overhead.py [--reps 3] [--lora] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import warnings

import torch

import rlpost.components  # noqa: F401  (registers the transforms)
from rlpost.grad.base import GRAD_TRANSFORMS
from rlpost.models.loading import LoraSettings, ModelConfig, load_model, peft_config

VARIANTS = [  # (label, registry name, config fields)
    ("trusted_projection side=both", "trusted_projection", {}),
    ("trusted_projection side=left", "trusted_projection", {"side": "left"}),
    ("trusted_projection svd=full", "trusted_projection", {"svd": "full"}),  # the cheap-projection choice:
    ("trusted_projection svd=lowrank", "trusted_projection", {"svd": "lowrank"}),  # randomized SVD of rank k
    ("direction_monitor cumulative", "direction_monitor", {}),
    ("direction_monitor grad", "direction_monitor", {"update": "grad"}),
]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3, help="timed calls per variant (median)")
    p.add_argument("--batch", type=int, default=8, help="sequences in the forward/backward")
    p.add_argument("--tokens", type=int, default=72, help="tokens per sequence")
    p.add_argument("--lora", action="store_true", help="LoRA r=16 on q,k,v,o instead of full fine-tuning")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = ModelConfig(lora=LoraSettings(enabled=args.lora))
    model = load_model(cfg)
    if args.lora:
        import peft

        model = peft.get_peft_model(model, peft_config(cfg))
    named = [(n, q) for n, q in model.named_parameters() if q.requires_grad]
    ids = torch.randint(
        0, model.config.vocab_size, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0)
    )
    fwd_bwd = timed(lambda: model(input_ids=ids, labels=ids).loss.backward())
    grads = {n: q.grad.clone() for n, q in named}
    optimizer = torch.optim.AdamW([q for _, q in named], lr=1e-5)
    optimizer.step()  # allocates the moments (warm-up)
    step = statistics.median(timed(optimizer.step) for _ in range(args.reps))
    state = {n: q.detach().clone() for n, q in named}  # every variant starts from the same weights

    print(
        f"SmolLM2-135M {'LoRA r=16' if args.lora else 'full fine-tuning'}: {len(named)} trainable tensors, "
        f"{sum(q.numel() for _, q in named) / 1e6:.1f}M params; torch threads {torch.get_num_threads()}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"forward+backward {args.batch}x{args.tokens} tokens: {fwd_bwd * 1e3:.0f} ms; AdamW step: {step * 1e3:.1f} ms\n"
    )
    header = f"| {'transform':<30} | snapshot ms | build ms | ms/step | ratio to AdamW step | vs fwd+bwd+step |"
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    print(f"| {'none':<30} | {'-':>11} | {'-':>8} | {0.0:7.1f} | {1.0:19.3f} | {1.0:15.3f} |")
    for label, name, fields in VARIANTS:
        with torch.no_grad():
            for n, q in named:
                q.copy_(state[n])
                q.grad.copy_(grads[n])
        cls = GRAD_TRANSFORMS.get(name)
        transform = cls(cls.Config(source="warmup", warmup_steps=1, **fields))
        snapshot = timed(lambda t=transform: t(named, 0))
        optimizer.step()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            build = timed(lambda t=transform: t(named, 1))
        transform(named, 2)  # warm-up call
        per_step = statistics.median(timed(lambda t=transform, i=i: t(named, 3 + i)) for i in range(args.reps))
        ratio, overall = (step + per_step) / step, (fwd_bwd + step + per_step) / (fwd_bwd + step)
        print(
            f"| {label:<30} | {snapshot * 1e3:11.1f} | {build * 1e3:8.0f} | {per_step * 1e3:7.1f} | "
            f"{ratio:19.3f} | {overall:15.3f} |"
        )


if __name__ == "__main__":
    main()
