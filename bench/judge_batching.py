"""The local yes/no judge's cost per GRPO step (reward=rubric with SmolLM2-135M as judge), before and after.

The job: the judge prompts of one default step, 8 completions x the arithmetic rubric's criteria, built
by the rubric reward itself (``RubricReward.judge_prompt``) from real default-data prompts with answers
of varied length. Variants, each timed as the median of ``--reps`` passes over all prompts:

- ``one by one``: a forward per prompt (no batching), full logits;
- ``batched, full logits``: ``batch_size`` prompts per forward in data order, ``[b, S, V]`` logits (rlpost before);
- ``batched, last position``: the same with ``logits_to_keep=1``;
- ``batched, last position, by length``: prompts sorted by length before batching (rlpost now).

All four must give the same scores (checked to 1e-4).

Usage: .venv/bin/python bench/judge_batching.py [--reps 3] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=8)
    args = p.parse_args()

    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.data.sources import load_datasets

    run = build_run(compose(["reward=rubric"]))
    reward = run.reward.funcs[0]
    judge = reward.judge
    judge.load()
    rows = load_datasets(run.data)[0]
    prompts = []
    for i in range(8):  # 2 prompts x G=4 answers of growing length, as a step's completions
        row = rows[i // 4]
        answer = f"{row['answer']}" + " Let me double-check the arithmetic step by step." * (i % 4)
        for criterion in reward.rubric_for(None):
            prompts.append(reward.judge_prompt(row["prompt"][-1]["content"], answer, criterion, row["answer"]))

    def score(batch: list[str], last_only: bool) -> list[float]:
        inputs = judge._encode(batch)
        extra = {"logits_to_keep": 1} if last_only else {}
        logits = judge._model(**inputs, **extra).logits[:, -1, :].float()
        return torch.sigmoid(logits[:, judge.yes_id] - logits[:, judge.no_id]).tolist()

    def batched(last_only: bool, by_length: bool, size: int) -> list[float]:
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i])) if by_length else list(range(len(prompts)))
        out = [0.0] * len(prompts)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            for i, s in zip(chunk, score([prompts[i] for i in chunk], last_only)):
                out[i] = s
        return out

    variants = [
        ("one by one", lambda: batched(False, False, 1)),
        ("batched, full logits", lambda: batched(False, False, args.batch_size)),
        ("batched, last position", lambda: batched(True, False, args.batch_size)),
        ("batched, last position, by length", lambda: batched(True, True, args.batch_size)),
    ]
    print(
        f"{len(prompts)} judge prompts ({len(prompts) // 8} criteria x 8 completions), batch size {args.batch_size}\n"
    )
    print("| variant | s per step | ratio to one by one | same scores |\n|---|---|---|---|")
    reference, first = None, None
    with torch.inference_mode():
        for label, run_variant in variants:
            run_variant()  # warm-up
            times, scores = [], None
            for _ in range(args.reps):
                t = time.perf_counter()
                scores = run_variant()
                times.append(time.perf_counter() - t)
            median = statistics.median(times)
            reference, first = reference or scores, first or median
            same = max(abs(a - b) for a, b in zip(scores, reference)) < 1e-4
            print(f"| {label} | {median:.2f} | {median / first:.2f}x | {'yes' if same else 'NO'} |", flush=True)


if __name__ == "__main__":
    main()
