"""Generate the T9 QE preference pairs (MiLMMT, seed 000 #1) from the bundled translation pairs.

    python -m rlpost.dev.make_qe_pairs     # writes recipes/data/qe_pairs_en_de_fr{,_heldout}.jsonl

A reference-free QE model scores (source, translation) with no reference. It is trained here as a
Bradley-Terry reward model (``rlpost train-rm``): each row of data=translation gives pairs whose
prompt is ``qe_prompt(source)`` (rlpost/rewards/qe_model.py, the prompt the ``qe_lid`` estimator
renders), chosen = the reference translation, rejected = one corruption of it, one pair per kind:

- ``other_row``: the reference of another row with the same target language (fluent, right language,
  wrong content: the negatives of bench/qe_judge_auc.py).
- ``near_miss``: another same-language reference with the same word count that differs in exactly one
  word (a wrong noun, adjective or verb); falls back to ``other_row`` when there is none.
- ``word_drop``: one word removed.
- ``shuffle``: the words in another order.
- ``copy_source``: the English source itself (untranslated).
- ``wrong_language``: the reference of a row in the other target language (wrong language and content).

Choices where the brief was silent:
- The QE model reads the source and the translation only (as CometKiwi does), not the target language:
  the ``qe_lid`` gate owns the language. So ``wrong_language`` takes another row's content too: the
  same sentence's translation into the other language would be a good pair for a row with that target,
  and without the target language the two pairs would contradict each other.
- Pairs are preferences, not regression targets: AUC (does a right translation outscore a wrong one?)
  is what the bench measures and what GRPO's group-relative advantage uses.
- Train pairs come from recipes/data/translation_en_de_fr.jsonl, held-out pairs from its ``_eval``
  file (the 20 pairs GRPO evaluates on; no (source, target) of it is in the training file).
  Deterministic given ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from rlpost.data.sources import RESOURCES
from rlpost.rewards.qe_model import qe_prompt

DATA = RESOURCES / "recipes" / "data"
SOURCE = DATA / "translation_en_de_fr.jsonl"
OUT = DATA / "qe_pairs_en_de_fr.jsonl"
KINDS = ("other_row", "near_miss", "word_drop", "shuffle", "copy_source", "wrong_language")


def near_miss(answer: str, pool: list[str]) -> list[str]:
    """The sentences of ``pool`` with as many words as ``answer`` that differ from it in exactly one word."""
    words = answer.split()
    return [s for s in pool if len(s.split()) == len(words) and sum(a != b for a, b in zip(s.split(), words)) == 1]


def corrupt(row: dict, kind: str, rows: list[dict], rng: random.Random) -> str:
    """A wrong translation of ``row`` (``source``, ``answer``, ``target_lang``) of the given kind, drawn
    from ``rows`` where it needs other rows; never equal to the reference."""
    answer, words = row["answer"], row["answer"].split()
    same = sorted({r["answer"] for r in rows if r["target_lang"] == row["target_lang"]} - {answer})
    other = sorted({r["answer"] for r in rows if r["target_lang"] != row["target_lang"]})
    if (kind in ("other_row", "near_miss") and not same) or (kind == "wrong_language" and not other):
        raise ValueError(f"corruption {kind!r} of {answer!r}: no other row to draw a translation from")
    if kind == "near_miss" and near_miss(answer, same):
        return rng.choice(near_miss(answer, same))
    if kind in ("other_row", "near_miss"):
        return rng.choice(same)
    if kind == "word_drop":
        drop = rng.randrange(len(words))
        return " ".join(words[:drop] + words[drop + 1 :])
    if kind == "shuffle":
        order = list(words)
        while order == words:
            rng.shuffle(order)
        return " ".join(order)
    if kind == "copy_source":
        return row["source"]
    if kind == "wrong_language":
        return rng.choice(other)
    raise ValueError(f"unknown corruption {kind!r}: one of {', '.join(KINDS)}")


def make_pairs(rows: list[dict], seed: int) -> list[dict]:
    """One preference pair per row and corruption kind: ``{prompt, chosen, rejected, corruption}``."""
    rng = random.Random(seed)
    pairs = []
    for row in rows:
        for kind in KINDS:
            rejected = corrupt(row, kind, rows, rng)
            assert rejected != row["answer"], (row, kind)
            pairs.append(
                {"prompt": qe_prompt(row["source"]), "chosen": row["answer"], "rejected": rejected, "corruption": kind}
            )
    return pairs


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="train pairs from seed, held-out pairs from seed + 1")
    parser.add_argument("--source", type=Path, default=SOURCE, help="translation rows; held-out: <stem>_eval.jsonl")
    parser.add_argument("--out", type=Path, default=OUT, help="train file; held-out goes to <stem>_heldout.jsonl")
    args = parser.parse_args(argv)
    train = make_pairs(read_rows(args.source), args.seed)
    heldout = make_pairs(read_rows(args.source.with_name(f"{args.source.stem}_eval.jsonl")), args.seed + 1)
    write_jsonl(args.out, train)
    write_jsonl(args.out.with_name(f"{args.out.stem}_heldout.jsonl"), heldout)
    print(f"wrote {len(train)} train and {len(heldout)} held-out pairs next to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
