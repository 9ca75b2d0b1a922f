"""Training forward + backward of one GRPO micro-batch by layout: the shared prefix (padded completions),
packing with a row per prompt group under dense block masks, packing into one row with segment attention
(rlpost/logprobs/packing.py, rlpost/logprobs/segment_attention.py).

    .venv/bin/python bench/packed_attention.py [--model smollm2-135m|tiny] [--reps 3]

Synthetic batches of 2 prompt groups x 4 completions (one group of 4 for the 4 x 1024 shape) with the
completion lengths below, random token ids; the backbone only (the LM head costs the same in every
layout), rlpost's oneDNN linears as in training. Prints the median seconds of ``--reps`` passes per
layout and the largest difference of the hidden states from the shared-prefix forward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlpost.generation import onednn
from rlpost.logprobs.packing import Packing
from rlpost.trainer.logprobs import backbone_hidden

GROUP = 4  # completions per prompt: each run of GROUP rows shares a prompt
# name -> (prompt tokens, completion lengths)
SHAPES = {
    "8 x 32": (45, [30, 32, 28, 31, 25, 32, 30, 29]),
    "8 x 64": (45, [64, 60, 58, 62, 64, 50, 61, 63]),
    "8 x 100": (45, [100, 96, 90, 102, 104, 80, 101, 99]),
    "8 x 128": (45, [128, 120, 126, 110, 128, 100, 120, 124]),
    "8 x 256, one long group": (60, [256, 256, 250, 240, 60, 40, 70, 50]),
    "8 x 256, ragged": (60, [120, 256, 90, 80, 150, 60, 140, 110]),
    "8 x 256, long": (60, [256, 190, 230, 140, 256, 180, 200, 178]),
    "4 x 1024": (60, [1024, 36, 100, 258]),
}
LAYOUTS = {
    "shared prefix": None,
    "packed: row per group, dense masks": Packing(max_tokens=1 << 20, segment_min_tokens=1 << 20),
    "packed: one row, segments": Packing(max_tokens=1 << 20, segment_min_tokens=0),
}


def batch(prompt: int, lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """ids, mask [B, prompt + T]: left-aligned prompts shared by each GROUP rows, right-padded completions."""
    width = max(lengths)
    ids = torch.randint(100, 40000, (len(lengths), prompt + width))
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :prompt] = ids[b - b % GROUP, :prompt]
        mask[b, : prompt + n] = 1
    return ids, mask, width


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m", choices=["smollm2-135m", "tiny"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM

    from rlpost.models.bundled import smollm2_folder
    from rlpost.models.loading import ModelConfig, tiny_random_folder

    folder = smollm2_folder() if args.model == "smollm2-135m" else tiny_random_folder(ModelConfig(source="tiny_random"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa")
    if onednn.available():
        onednn.use_onednn_linears(model)
    print(f"{args.model}, {torch.get_num_threads()} threads; seconds per forward + backward, median of {args.reps}\n")
    print("| batch | longest group's block | " + " | ".join(LAYOUTS) + " | segments vs dense | max abs diff |")
    print("|---" * (len(LAYOUTS) + 4) + "|")
    for name in args.shapes:
        prompt, lengths = SHAPES[name]
        ids, mask, width = batch(prompt, lengths)
        keep = mask[:, -width:, None].bool()
        times, hidden = {}, {}
        for layout, packing in LAYOUTS.items():
            runs = []
            for _ in range(args.reps):
                model.zero_grad(set_to_none=True)
                start = time.perf_counter()
                out = backbone_hidden(model.model, ids, mask, width, True, packing)
                (out * keep).square().mean().backward()
                runs.append(time.perf_counter() - start)
            times[layout], hidden[layout] = statistics.median(runs), out.detach() * keep
        block = max(prompt + sum(n - 1 for n in lengths[g : g + GROUP]) for g in range(0, len(lengths), GROUP))
        diff = max((h - hidden["shared prefix"]).abs().max().item() for h in hidden.values())
        ratio = times["packed: row per group, dense masks"] / times["packed: one row, segments"]
        cells = " | ".join(f"{t:.2f}" for t in times.values())
        print(f"| {name} | {block} | {cells} | {ratio:.2f}x | {diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
