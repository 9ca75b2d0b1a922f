"""T9 (MiLMMT, seed 000 #1): the QE preference pairs built from the bundled translation pairs
(rlpost/dev/make_qe_pairs.py), a QE classifier trained on them by the real ``rlpost train-rm`` on the tiny
model, and that folder read by ``qe_lid``'s ``model`` estimator exactly as it was trained:
``q = sigmoid((s - score_mean) / score_std)``, ``s`` the classifier's scalar on ``source\\n`` + translation + EOS."""

from __future__ import annotations

import json
import random

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rlpost import cli
from rlpost.app import build_run_of, compose
from rlpost.dev.make_qe_pairs import KINDS, SOURCE, corrupt, main, make_pairs, near_miss, read_rows
from rlpost.reward_model.pairs import RM_META, read_pairs
from rlpost.rewards.qe_model import QEModel, qe_prompt

from support.paths import REPO

DATA = REPO / "recipes" / "data"
ROWS = [
    {"source": "The dog is small.", "answer": "Der Hund ist klein.", "target_lang": "de"},
    {"source": "The dog is old.", "answer": "Der Hund ist alt.", "target_lang": "de"},
    {"source": "I see the book.", "answer": "Ich sehe das Buch.", "target_lang": "de"},
    {"source": "The cat is small.", "answer": "Le chat est petit.", "target_lang": "fr"},
    {"source": "Where is the car?", "answer": "Où est la voiture ?", "target_lang": "fr"},
]


def test_each_corruption_by_hand():
    row, rng = ROWS[0], random.Random(0)
    # near_miss: same word count, exactly one word differs -> only "Der Hund ist alt." (klein -> alt)
    assert near_miss(row["answer"], ["Der Hund ist alt.", "Ich sehe das Buch.", "Der Hund alt."]) == [
        "Der Hund ist alt."
    ]
    assert corrupt(row, "near_miss", ROWS, rng) == "Der Hund ist alt."
    # other_row: a German reference of another row
    assert corrupt(row, "other_row", ROWS, rng) in {"Der Hund ist alt.", "Ich sehe das Buch."}
    # word_drop: 4 words -> 3 of them, in order
    dropped = corrupt(row, "word_drop", ROWS, rng).split()
    assert len(dropped) == 3 and all(w in row["answer"].split() for w in dropped)
    shuffled = corrupt(row, "shuffle", ROWS, rng)
    assert sorted(shuffled.split()) == sorted(row["answer"].split()) and shuffled != row["answer"]
    assert corrupt(row, "copy_source", ROWS, rng) == "The dog is small."
    assert corrupt(row, "wrong_language", ROWS, rng) in {"Le chat est petit.", "Où est la voiture ?"}
    # only German rows: no other language to draw from; a French row alone: no other French row
    with pytest.raises(ValueError, match="no other row"):
        corrupt(row, "wrong_language", ROWS[:3], rng)
    with pytest.raises(ValueError, match="no other row"):
        corrupt(ROWS[3], "other_row", ROWS[:4], rng)
    # a sentence with no one-word neighbour falls back to another row: "Ich sehe das Buch." differs in 3 words
    assert corrupt(ROWS[2], "near_miss", ROWS, rng) in {"Der Hund ist klein.", "Der Hund ist alt."}


def test_pairs_one_per_kind_with_the_qe_prompt_and_the_bundled_files_are_current(tmp_path):
    pairs = make_pairs(ROWS, seed=0)
    assert [p["corruption"] for p in pairs[:6]] == list(KINDS) and len(pairs) == 6 * 5
    assert {p["prompt"] for p in pairs[:6]} == {qe_prompt("The dog is small.")} == {"The dog is small.\n"}
    assert all(p["chosen"] == "Der Hund ist klein." != p["rejected"] for p in pairs[:6])
    # the committed files are what the generator writes (regenerate with python -m rlpost.dev.make_qe_pairs)
    out = tmp_path / "qe.jsonl"
    assert main(["--out", str(out)]) == 0
    for name in ("qe_pairs_en_de_fr.jsonl", "qe_pairs_en_de_fr_heldout.jsonl"):
        written = (tmp_path / name.replace("qe_pairs_en_de_fr", "qe")).read_text(encoding="utf-8")
        assert written == (DATA / name).read_text(encoding="utf-8"), f"{name} is stale"
    train, heldout = (
        read_pairs(str(DATA / "qe_pairs_en_de_fr.jsonl")),
        read_pairs(str(out.with_name("qe_heldout.jsonl"))),
    )
    assert len(train) == 6 * len(read_rows(SOURCE)) == 840 and len(heldout) == 6 * 20
    eval_keys = {(r["source"], r["answer"]) for r in read_rows(DATA / "translation_en_de_fr_eval.jsonl")}
    # no held-out translation is trained on
    assert not eval_keys & {(p.prompt.removesuffix("\n"), p.chosen) for p in train}


@pytest.fixture(scope="module")
def qe_folder(tmp_path_factory):
    """A tiny-random QE classifier trained by the real CLI on the bundled QE pairs: 3 steps, plain rendering."""
    run_dir = tmp_path_factory.mktemp("qe") / "run"
    argv = [
        "train-rm",
        "model=tiny-random",
        "progress=false",
        "train.steps=3",
        "train.learning_rate=1e-3",
        "data.conversational=false",
        f"data.train={DATA / 'qe_pairs_en_de_fr.jsonl'}",
        f"data.heldout={DATA / 'qe_pairs_en_de_fr_heldout.jsonl'}",
        f"hydra.run.dir={run_dir}",
    ]
    assert cli.main(argv) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["train_pairs"] == 840 and summary["after"]["pairs"] == 120
    return run_dir / "model"


def test_a_train_rm_folder_is_read_as_trained_and_standardized(qe_folder):
    meta = json.loads((qe_folder / RM_META).read_text())
    assert meta["conversational"] is False and meta["score_std"] > 0
    sources, outs = ["The dog is small.", "The cat is small."], ["Der Hund ist klein.", "Le chat est vieux."]
    got = QEModel(str(qe_folder), "classifier").scores(sources, outs)
    # by hand: plain rendering = qe_prompt(source) + translation + EOS, the scalar standardized by the
    # held-out mean/std train-rm stored, then a sigmoid
    tok = AutoTokenizer.from_pretrained(qe_folder)
    model = AutoModelForSequenceClassification.from_pretrained(qe_folder).eval()
    expected = []
    for s, t in zip(sources, outs):
        ids = tok(f"{s}\n{t}{tok.eos_token}", add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            raw = model(input_ids=ids).logits[0, 0].item()
        expected.append(1 / (1 + torch.exp(torch.tensor(-(raw - meta["score_mean"]) / meta["score_std"])).item()))
    assert got == pytest.approx(expected, abs=1e-5)


def test_the_recipe_with_two_qe_folders_scores_gate_times_their_mean(qe_folder, tmp_path):
    """The recipe header's launch shape (estimators=[model], two qe_models) builds, and its reward on a
    held-out row is gate * (q_a + q_b) / 2 (the same folder twice here: q_a = q_b = q)."""
    folders = f"[{qe_folder},{qe_folder}]"
    overrides = [
        "recipe=milmmt_mt",
        "reward.terms.0.params.estimators=[model]",
        f"reward.terms.0.params.qe_models={folders}",
        "reward.terms.0.params.qe_kind=classifier",
    ]
    run = build_run_of(compose(overrides), overrides)
    qe_lid = run.reward.funcs[0]
    assert len(qe_lid.qe_models) == 2 and qe_lid.terms() == ["model_0", "model_1"]
    q = QEModel(str(qe_folder), "classifier").scores(["The dog is small."], ["Der Hund ist klein."])[0]
    out = qe_lid(
        ["p", "p"],
        ["Der Hund ist klein.", "Der Hund ist klein."],
        source=["The dog is small."] * 2,
        target_lang=["de", "fr"],
    )
    assert out == pytest.approx([(q + q) / 2, 0.0], abs=1e-6)  # German for a French target: gated out
