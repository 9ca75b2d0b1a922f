"""How well qe_lid's QE estimators separate right from wrong translations: the local SmolLM2 judge, and the
trained T9 QE classifiers (``--qe-model FOLDER``, what ``rlpost train-rm`` writes; recipes/milmmt_mt.yaml).

On the 20 held-out pairs of data=translation: the reference translation (positive) against the reference
of another row with the same target language (negative: fluent, right language, wrong content).
Prints each estimator's AUC, and that of the whole qe_lid reward with it (gated). With ``--qe-model``, also
the classifier's pairwise accuracy per corruption kind on the held-out QE pairs
(recipes/data/qe_pairs_en_de_fr_heldout.jsonl, rlpost/dev/make_qe_pairs.py), and with two or more
folders the qe_lid reward averaging them (``estimators: [model]``, ``qe_models: [...]``).
Run: PYTHONPATH=. python bench/qe_judge_auc.py [--qe-model outputs/qe_a/model ...] [--no-judge]

Measured here (2026-12-03, CPU): judge AUC 0.509 (mean P(Yes) 0.406 vs 0.400); the whole qe_lid reward
0.546 (0.572 vs 0.568); a "Do these two sentences mean the same thing?" template: AUC 0.546. So
SmolLM2-135M does not judge adequacy against such hard negatives: in qe_lid it mostly adds noise, and
the gate and the heuristic do the work (wrong language, copies, empty/runaway length).
The T9 QE classifier (SmolLM2-135M under a score head, ``rlpost train-rm``, 20 steps, the command in
recipes/milmmt_mt.yaml; 2026-12-08, CPU): AUC 0.797 (mean 0.637 vs 0.508); gated in qe_lid 0.696 (the LID
gate rejects 3 of the 20 correct French references, and 3 negatives); pairwise accuracy per corruption on
the held-out QE pairs: other_row 0.80, near_miss 0.75, word_drop/shuffle/copy_source 1.00, wrong_language 0.75.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import rlpost.components  # noqa: F401
from rlpost.core.schema import build_config
from rlpost.rewards.base import REWARDS
from rlpost.rewards.qe_model import QEModel

DATA = Path(__file__).resolve().parent.parent / "recipes/data"


def auc(pos: list[float], neg: list[float]) -> float:
    """P(score of a positive > score of a negative), ties counted half."""
    pairs = [(p > n) + 0.5 * (p == n) for p in pos for n in neg]
    return sum(pairs) / len(pairs)


def heldout_rows() -> tuple[list[dict], list[str]]:
    """The 20 held-out translation rows and each one's negative: the next row's reference of the same target language."""
    rows = [json.loads(line) for line in (DATA / "translation_en_de_fr_eval.jsonl").read_text().splitlines()]
    negatives = []
    for i, row in enumerate(rows):
        other = next(
            r
            for r in rows[i + 1 :] + rows[:i]
            if r["target_lang"] == row["target_lang"] and r["answer"] != row["answer"]
        )
        negatives.append(other["answer"])
    return rows, negatives


def qe_lid(params: dict):
    cls = REWARDS.get("qe_lid")
    return cls(build_config(cls.Config, params, "bench"))


def per_corruption(folder: str) -> dict[str, float]:
    """Share of the held-out QE pairs where the classifier scores the reference above the corruption, per kind."""
    pairs = [json.loads(line) for line in (DATA / "qe_pairs_en_de_fr_heldout.jsonl").read_text().splitlines()]
    model = QEModel(folder, "classifier")
    sources = [p["prompt"].removesuffix("\n") for p in pairs]
    chosen = model.scores(sources, [p["chosen"] for p in pairs])
    rejected = model.scores(sources, [p["rejected"] for p in pairs])
    wins: dict[str, list[float]] = defaultdict(list)
    for p, c, r in zip(pairs, chosen, rejected):
        wins[p["corruption"]].append((c > r) + 0.5 * (c == r))
    return {kind: sum(v) / len(v) for kind, v in wins.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qe-model", action="append", default=[], help="a QE classifier folder (repeatable)")
    parser.add_argument("--no-judge", action="store_true", help="skip the SmolLM2 judge (it loads a second model)")
    args = parser.parse_args(argv)
    rows, negatives = heldout_rows()
    rewards = {}
    if not args.no_judge:
        rewards["judge"] = qe_lid({"estimators": ["judge"], "judge": {"device": "cpu"}})
        rewards["qe_lid(judge+heuristic)"] = qe_lid({"judge": {"device": "cpu"}})
    for i, folder in enumerate(args.qe_model):
        rewards[f"qe_lid(model {i})"] = qe_lid(
            {"estimators": ["model"], "qe_models": [folder], "qe_kind": "classifier"}
        )
    if len(args.qe_model) > 1:
        rewards["qe_lid(mean of models)"] = qe_lid(
            {"estimators": ["model"], "qe_models": args.qe_model, "qe_kind": "classifier"}
        )
    cols = {"source": [r["source"] for r in rows], "target_lang": [r["target_lang"] for r in rows]}
    for i, folder in enumerate(args.qe_model):  # the classifier alone, ungated
        model = QEModel(folder, "classifier")
        pos = model.scores(cols["source"], [r["answer"] for r in rows])
        neg = model.scores(cols["source"], negatives)
        print(
            f"model {i} ({folder}): AUC {auc(pos, neg):.3f}  mean pos {sum(pos) / 20:.3f}  mean neg {sum(neg) / 20:.3f}"
        )
        kinds = per_corruption(folder)
        print("  held-out pairwise accuracy by corruption: " + ", ".join(f"{k} {v:.2f}" for k, v in kinds.items()))
    for name, reward in rewards.items():
        pos = reward(["p"] * len(rows), [r["answer"] for r in rows], **cols)
        neg = reward(["p"] * len(rows), negatives, **cols)
        print(
            f"{name}: AUC {auc(pos, neg):.3f}  mean pos {sum(pos) / len(pos):.3f}  mean neg {sum(neg) / len(neg):.3f}"
        )


if __name__ == "__main__":
    main()
