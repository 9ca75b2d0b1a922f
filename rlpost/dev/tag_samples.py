"""``python -m rlpost.dev.tag_samples``: sample SmolLM2-135M-Instruct under the templates of the CRPO and RDPO
recipes and write the completions to ``recipes/data/tag_completions.jsonl``.

RDPO trains on a ``<think>/<answer>`` format term next to correctness (StructPO did too, under the same template,
before it moved to data=staged_arith's stages), CRPO on a persona-style term
(word_recall of the character profile); the tiny test model writes neither tags nor words, so
tests/config/test_recipes_tags.py scores these real completions with each recipe's own reward terms to show that
the second column varies under the recipe's template (format was constant 0 under "Give only the final answer.").
Each row: ``recipe`` (crpo, or ``tags`` for rdpo), ``prompt`` (the user
message exactly as the recipe renders it), the row's ``answer`` (and ``profile`` for crpo) and ``completion``.
Each set is seeded (torch.manual_seed(0) before it), sampled at the recipes' rollout temperature 1.0, 64 new
tokens, on CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlpost.core.schema import RESOURCES

OUT = RESOURCES / "recipes" / "data" / "tag_completions.jsonl"


def recipe_rows(recipe: str, size: int) -> tuple[str, list[dict]]:
    """The recipe's data template and ``size`` of its training rows (seed 0), as the run renders them."""
    from rlpost.app import build_run_of, compose
    from rlpost.data.sources import load_datasets

    overrides = [f"recipe={recipe}", f"data.train_size={size}", "data.eval_size=1", "eval.size=1", "seed=0"]
    run = build_run_of(compose(overrides), overrides)
    train, _ = load_datasets(run.data)
    return run.data.template, [dict(row) for row in train]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--prompts", type=int, default=12, help="prompts per template")
    parser.add_argument("--samples", type=int, default=4, help="completions per prompt")
    args = parser.parse_args(argv)

    import torch

    import rlpost.components  # noqa: F401  (registers everything build_run needs)
    from rlpost.models.loading import ModelConfig, load_model, load_tokenizer

    cfg = ModelConfig(source="smollm2")
    tokenizer, model = load_tokenizer(cfg), load_model(cfg).eval()
    tokenizer.padding_side = "left"
    out = []
    for name, recipe in (("crpo", "crpo"), ("tags", "rdpo")):
        torch.manual_seed(0)
        _, rows = recipe_rows(recipe, args.prompts)
        texts = [tokenizer.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in rows]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            ids = model.generate(
                **enc, max_new_tokens=64, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                num_return_sequences=args.samples, pad_token_id=tokenizer.pad_token_id,
            )  # fmt: skip
        completions = tokenizer.batch_decode(ids[:, enc["input_ids"].size(1) :], skip_special_tokens=True)
        for i, completion in enumerate(completions):
            row = rows[i // args.samples]
            extra = {"profile": row["profile"]} if "profile" in row else {}
            out.append(
                {"recipe": name, "prompt": row["prompt"][-1]["content"], "answer": row["answer"], **extra,
                 "completion": completion}
            )  # fmt: skip
    args.out.write_text("".join(json.dumps(r) + "\n" for r in out), encoding="utf-8")
    print(f"wrote {len(out)} completions to {args.out}")


if __name__ == "__main__":
    main()
