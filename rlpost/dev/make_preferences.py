"""Generate the bundled arithmetic preference pairs (gold answer chosen, a perturbed answer rejected).

    python -m rlpost.dev.make_preferences            # writes recipes/data/arith_preferences*.jsonl

Questions come from reasoning-gym ``basic_arithmetic`` with the task params of
``conf/data/basic_arithmetic.yaml`` and the same prompt template, so a reward model trained on them
scores the prompts GRPO trains on. Deterministic given ``--seed``.

Choices where the brief was silent:
- Rejected answers, one kind per pair drawn uniformly: ``off_by`` (gold + d, d in +-1..10),
  ``wrong_operator`` (the result of another of + - *), ``digit`` (one digit of the gold changed),
  ``sign`` (the negated gold). A kind that gives back the gold falls through to ``off_by``.
- Both answers of a pair share one phrasing drawn from ``PHRASINGS`` (bare number, "The answer is
  N.", "<expr> = N", "Answer: N"), so the number is the only difference the model can learn from.
- Train rows come from ``seed``, held-out rows from ``seed + 1``; no held-out question is a train
  question, and neither file holds a question of GRPO's default held-out eval set (``data.seed=0``),
  so the RM never saw the prompts the policy is evaluated on.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from rlpost.data.sources import RESOURCES

OUT = RESOURCES / "recipes" / "data" / "arith_preferences.jsonl"
PHRASINGS = ("{n}", "The answer is {n}.", "{expr} = {n}", "Answer: {n}")
KINDS = ("off_by", "wrong_operator", "digit", "sign")
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def perturb(expression: str, gold: int, kind: str, rng: random.Random) -> int:
    """A wrong answer for ``expression`` (``"4 - 1"``) of the given kind; never equal to ``gold``."""
    left, op, right = expression.split()
    a, b = int(left), int(right)
    wrong = gold
    if kind == "wrong_operator":
        wrong = OPS[rng.choice([o for o in OPS if o != op])](a, b)
    elif kind == "digit":
        digits = list(str(abs(gold)))
        i = rng.randrange(len(digits))
        digits[i] = rng.choice([d for d in "0123456789" if d != digits[i]])
        wrong = int("".join(digits)) * (-1 if gold < 0 else 1)
    elif kind == "sign":
        wrong = -gold
    while wrong == gold:  # off_by, and the fallback of every kind that gave back the gold
        wrong = gold + rng.choice([d for d in range(-10, 11) if d])
    return wrong


def grpo_setup():
    """The default data config (conf/data/basic_arithmetic.yaml) and its held-out questions."""
    from rlpost.app import compose
    from rlpost.core.schema import build_config
    from rlpost.data.sources import DataConfig, load_datasets

    data = build_config(DataConfig, compose(["data=basic_arithmetic", "seed=0"]).data, "data")
    _, eval_set = load_datasets(data)
    return data, {row[0]["content"] for row in eval_set["prompt"]}


def make_rows(data, seed: int, size: int, skip: set[str]) -> list[dict]:
    """``size`` preference rows of the task in ``data`` (a DataConfig) whose prompts are not in
    ``skip`` (``skip`` gains them)."""
    import reasoning_gym

    rng = random.Random(seed)
    rows: list[dict] = []
    tries = 0
    while len(rows) < size:
        tries += 1
        items = reasoning_gym.create_dataset(data.task, seed=seed * 1000 + tries, size=4 * size, **data.task_params)
        for item in items:
            prompt = data.template.format(**{**item, "question": item["question"]})
            if prompt in skip or len(rows) == size:
                continue
            skip.add(prompt)
            expression, gold = item["metadata"]["expression"], int(item["answer"])
            kind = rng.choice(KINDS)
            wrong = perturb(expression, gold, kind, rng)
            phrasing = rng.choice(PHRASINGS)
            rows.append(
                {
                    "prompt": prompt,
                    "chosen": phrasing.format(n=gold, expr=expression),
                    "rejected": phrasing.format(n=wrong, expr=expression),
                    "answer": str(gold),
                    "perturbation": kind,
                }
            )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="train rows from seed, held-out rows from seed + 1")
    parser.add_argument("--train", type=int, default=400, help="train pairs")
    parser.add_argument("--heldout", type=int, default=100, help="held-out pairs")
    parser.add_argument("--out", type=Path, default=OUT, help="train file; held-out goes to <stem>_heldout.jsonl")
    args = parser.parse_args(argv)
    data, skip = grpo_setup()  # GRPO's held-out questions stay unseen
    train = make_rows(data, args.seed, args.train, skip)
    heldout = make_rows(data, args.seed + 1, args.heldout, skip)
    write_jsonl(args.out, train)
    write_jsonl(args.out.with_name(f"{args.out.stem}_heldout.jsonl"), heldout)
    print(f"wrote {len(train)} train and {len(heldout)} held-out pairs next to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
