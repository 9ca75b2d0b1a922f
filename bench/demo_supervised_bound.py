"""How far the default demo could go with the answers given: supervised steps on gold answers (issue 22).

Superseded by ``rlpost sft recipe=sft_demo_bound seed=0`` (recipes/sft_demo_bound.yaml, issue 50): the same 20 steps
on the same targets and rows through TRL's SFTTrainer, with a run directory, held-out evaluation at steps 0, 10 and
20 and checkpoints; bench/METHODS.md gives that command. This script stays for its per-operator breakdown and its
lr / prompts-per-step grid.

Not a method. It bounds the demo's target from above. ``recipe=default`` trains SmolLM2-135M-Instruct for 20 steps on
2 prompts each, 40 prompts in all, with exact correctness as the only reward. Here the same model takes 20 AdamW steps
on the gold answers of 40 training prompts of the same seed instead, with the recipe's optimizer settings: constant
lr, no weight decay, gradients clipped at 1.0. The target is ``"<expression> = <answer>"`` and EOS, the format the RL
policy converges to, and the loss is the mean NLL of its tokens. A policy that samples its own answers and is only
told right or wrong gets less information per prompt than the answer itself. A supervised run that falls short of
the demo's target is evidence that 20 RL steps on 40 prompts will too.

Held-out accuracy is ``eval/accuracy`` exactly as ``rlpost train`` computes it (rlpost/evaluation/held_out.py ``evaluate_run``:
greedy, the run's reward and criterion, the same 100 prompts), before training, at step 10 and at step 20, with the
held-out prompts split by operator (``subneg``: a subtraction with a negative answer).

Usage: .venv/bin/python bench/demo_supervised_bound.py [--seeds 0 2] [--lrs 1e-5 3e-5]
"""

from __future__ import annotations

import argparse
import re
from collections import Counter

import torch


def operator_kind(question: str) -> str:
    """add, sub, subneg (a - b with a < b) or mul, from a basic_arithmetic question ("Calculate 5 - 9.")."""
    a, op, b = re.search(r"(\d+) ([-+*]) (\d+)", question).groups()  # type: ignore[union-attr]
    return {"+": "add", "*": "mul"}.get(op, "subneg" if int(a) < int(b) else "sub")


def gold_target(row: dict) -> str:
    """ "<expression> = <answer>": the format the RL policy converges to ("5 - 9 = -4")."""
    expression = re.search(r"Calculate (.*)\.", row["prompt"][-1]["content"]).group(1)  # type: ignore[union-attr]
    return f"{expression} = {row['answer']}"


def held_out_accuracy(run, model, tokenizer, held) -> tuple[float, str]:
    """``eval/accuracy`` and the right answers per operator ("add 19/30 ...") on the run's held-out split."""
    from rlpost.evaluation.held_out import evaluate_run

    items: list[dict] = []
    accuracy = evaluate_run(run, model, tokenizer, held, [], items)["eval/accuracy"]
    right, total = Counter(), Counter()
    for item in items:
        kind = operator_kind(held[item["index"]]["prompt"][-1]["content"])
        right[kind] += bool(item["correct"])
        total[kind] += 1
    return accuracy, " ".join(f"{k} {right[k]}/{total[k]}" for k in ("add", "sub", "subneg", "mul"))


def supervised_run(seed: int, lr: float, steps: int, per_step: int) -> list[tuple[int, float, str]]:
    """(step, accuracy, per operator) before training, halfway and at the end."""
    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.data.sources import load_datasets
    from rlpost.models.loading import load_model, load_tokenizer
    from rlpost.tools.sim_alignment import Example, batch_tensors, encode

    torch.manual_seed(seed)
    run = build_run(compose(["recipe=default", f"seed={seed}", "logging.progress=false"]))
    train, held = load_datasets(run.data)
    tokenizer, model = load_tokenizer(run.model), load_model(run.model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=run.settings.train.weight_decay)
    marks = [(0, *held_out_accuracy(run, model, tokenizer, held))]
    model.train()
    for step in range(steps):
        rows = [train[step * per_step + j] for j in range(per_step)]
        pairs = [encode(tokenizer, Example(row["prompt"], gold_target(row), {})) for row in rows]
        ids, mask, labels = batch_tensors(pairs, tokenizer.pad_token_id)  # labels: -100 outside the targets
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), run.settings.train.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad()
        if (step + 1) in (steps // 2, steps):
            marks.append((step + 1, *held_out_accuracy(run, model, tokenizer, held)))
            model.train()
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--lrs", type=float, nargs="+", default=[1e-5, 3e-5])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--per-step", type=int, default=2, help="training prompts per step")
    args = parser.parse_args()
    print("| seed | lr | step | held-out accuracy | right per operator |")
    print("|---|---|---|---|---|")
    for seed in args.seeds:
        for lr in args.lrs:
            for step, accuracy, kinds in supervised_run(seed, lr, args.steps, args.per_step):
                print(f"| {seed} | {lr:g} | {step} | {accuracy:.2f} | {kinds} |", flush=True)


if __name__ == "__main__":
    main()
