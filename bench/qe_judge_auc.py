"""How well the qe_lid judge estimator (local SmolLM2, yes/no) separates right from wrong translations.

On the 20 held-out pairs of data=translation: the reference translation (positive) against the reference
of another row with the same target language (negative: fluent, right language, wrong content).
Prints the judge's AUC, and that of the whole qe_lid reward (judge + heuristic, gated).
Run: PYTHONPATH=. python bench/qe_judge_auc.py

Measured here (2026-12-03, CPU): judge AUC 0.509 (mean P(Yes) 0.406 vs 0.400); the whole qe_lid reward
0.546 (0.572 vs 0.568); a "Do these two sentences mean the same thing?" template: AUC 0.546. So
SmolLM2-135M does not judge adequacy against such hard negatives: in qe_lid it mostly adds noise, and
the gate and the heuristic do the work (wrong language, copies, empty/runaway length). Use a stronger
judge (judge.model=..., or backend=openai) for a real adequacy signal.
"""

from __future__ import annotations

import json
from pathlib import Path

import rlpost.components  # noqa: F401
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS


def auc(pos: list[float], neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties counted half."""
    pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
    return sum(pairs) / len(pairs)


def main() -> None:
    path = Path(__file__).resolve().parent.parent / "recipes/data/translation_en_de_fr_eval.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    negatives = []
    for i, row in enumerate(rows):
        other = next(
            r
            for r in rows[i + 1 :] + rows[:i]
            if r["target_lang"] == row["target_lang"] and r["answer"] != row["answer"]
        )
        negatives.append(other["answer"])
    cls = REWARDS.get("qe_lid")
    judge_only = cls(build_config(cls.Config, {"estimators": ["judge"], "judge": {"device": "cpu"}}, "bench"))
    both = cls(build_config(cls.Config, {"judge": {"device": "cpu"}}, "bench"))
    cols = {"source": [r["source"] for r in rows], "target_lang": [r["target_lang"] for r in rows]}
    for name, reward in (("judge", judge_only), ("qe_lid", both)):
        pos = reward(["p"] * len(rows), [r["answer"] for r in rows], **cols)
        neg = reward(["p"] * len(rows), negatives, **cols)
        print(
            f"{name}: AUC {auc(pos, neg):.3f}  mean pos {sum(pos) / len(pos):.3f}  mean neg {sum(neg) / len(neg):.3f}"
        )


if __name__ == "__main__":
    main()
