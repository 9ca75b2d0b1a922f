"""reward=qe_lid (rlpost/rewards/qe_lid.py): the lingua language gate and the estimator mean, hand-computed
on real short sentences in English, German and French; two QE classifier folders averaged in one term
(gate * mean over both, MiLMMT's reward); failure paths and config errors."""

from __future__ import annotations

import importlib.util
import math
import sys
import types

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

import rlpost.components  # noqa: F401  (registers)
from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.models.loading import ModelConfig, tiny_random_folder
from rlpost.rewards.base import REWARDS
from rlpost.rewards.qe_lid import length_score, no_copy_score
from rlpost.scoring.terms import build_reward_terms

from support.runs import one_step

SRC = "The house is big and old."  # 25 characters


def make(**params):
    cls = REWARDS.get("qe_lid")
    return cls(build_config(cls.Config, {"estimators": ["length", "no_copy"], **params}, "test"))


def test_estimators_by_hand():
    # length: rho = 27 / 25 = 1.08, ratio 1 -> min / max = 1 / 1.08
    assert length_score(SRC, "Das Haus ist gross und alt.", 1.0) == pytest.approx(1 / 1.08)
    # ratio 1.2: rho 1.08 -> 1.08 / 1.2 = 0.9
    assert length_score(SRC, "Das Haus ist gross und alt.", 1.2) == pytest.approx(0.9)
    assert length_score(SRC, "", 1.0) == 0.0
    # no_copy, words of >= 4 letters: [house, sehr] -> "house" is in the source -> 1 - 1/2
    assert no_copy_score("The house is very old.", "Das house ist sehr alt.", 4) == 0.5
    assert no_copy_score(SRC, "Das Haus ist alt.", 4) == 1.0  # [haus]: not in the source
    assert no_copy_score(SRC, SRC, 4) == 0.0  # [house]: a copy
    assert no_copy_score(SRC, "Ja 42", 4) == 1.0  # no word of >= 4 letters


def test_gate_times_mean_by_hand():
    reward = make(target_column="target_lang")
    outs = [
        "Das Haus ist gross und alt.",  # German, target de: gate 1
        "Das Haus ist gross und alt.",  # German, target fr: gate 0
        "La maison est grande et vieille.",  # French, target fr: gate 1
        SRC,  # a copy of the English source: gate 0
        "Das house ist sehr alt.",  # German with a copied word: gate 1
    ]
    sources = [SRC, SRC, SRC, SRC, "The house is very old."]
    logged = {}
    rewards = reward(
        ["p"] * 5,
        outs,
        source=sources,
        target_lang=["de", "fr", "French", "de", "de"],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    # row 0: length 1/1.08 = 0.925926, no_copy 1 -> mean 0.962963
    # row 2: 32 chars: length 25/32 = 0.78125; [maison, grande, vieille] none copied -> 1 -> mean 0.890625
    # row 4: 23 chars of 22: length 22/23; no_copy 0.5 -> mean (22/23 + 0.5) / 2
    expected = [(1 / 1.08 + 1) / 2, 0.0, (0.78125 + 1) / 2, 0.0, (22 / 23 + 0.5) / 2]
    assert rewards == pytest.approx(expected)
    assert logged["qe_lid/gate"] == pytest.approx(3 / 5)
    assert logged["qe_lid/no_copy"] == pytest.approx((1 + 1 + 0.5) / 3)


def test_confidence_threshold_constant_target_and_think():
    # lingua's confidence of German for this sentence among {en, de, fr} is about 0.72
    text = "<think>Hmm, English</think>Das Haus ist gross und alt."
    assert make(target="de", target_column=None)(["p"], [text], source=[SRC]) == [pytest.approx((1 / 1.08 + 1) / 2)]
    assert make(target="German", target_column=None, min_confidence=0.99)(["p"], [text], source=[SRC]) == [0.0]
    # strip_think=False: the English trace is part of the scored text, which then fails the gate
    assert make(target="de", target_column=None, strip_think=False)(["p"], [text], source=[SRC]) == [0.0]


def test_failure_paths_empty_unknown_and_judge_failure():
    reward = make(target="de", target_column=None)
    # empty output and digits only: lingua places neither -> gated to 0 (not None)
    assert reward(["p"] * 3, ["", "   ", "12345 678"], source=[SRC] * 3) == [0.0, 0.0, 0.0]
    judge = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "retries": 0, "cache": False}
    failing = make(target="de", target_column=None, estimators=["judge", "length"], judge=judge)
    # the judge's connection fails (on_failure=skip -> None): the mean is over the length estimator alone
    assert failing(["p"], ["Das Haus ist gross und alt."], source=[SRC]) == [pytest.approx(1 / 1.08)]
    only_judge = make(target="de", target_column=None, estimators=["judge"], judge=judge)
    assert only_judge(["p", "p"], ["Das Haus ist gross und alt.", ""], source=[SRC, SRC]) == [None, 0.0]
    with pytest.raises(ValueError, match="Spanish is not among languages"):
        make(target_column="t")(["p"], ["x"], source=[SRC], t=["es"])
    with pytest.raises(KeyError, match="source"):
        reward(["p"], ["x"], src=[SRC])


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"estimators": ["comet"]}, "estimators: unknown.*Valid choices: judge, heuristic"),
        ({"languages": ["en", "xx"]}, "languages: unknown language 'xx'"),
        ({"languages": ["en"]}, "languages: lingua needs at least two"),
        ({"target": "es", "target_column": None}, "target: Spanish is not among"),
        ({"target": None, "target_column": None}, "target: set target"),
        ({"min_confidence": 1.5}, "min_confidence: needs"),
        ({"estimators": ["model"]}, "qe_models: estimator 'model' needs qe_models"),
        ({"estimators": ["model"], "qe_models": ["/nowhere"], "qe_kind": "classifier"}, r"qe_models: \[0\] .*nowhere"),
        ({"qe_models": ["/nowhere"], "qe_kind": "classifier"}, "qe_models: is set but estimators has no 'model'"),
    ],
)
def test_config_errors_name_the_key(params, match):
    terms = [{"name": "qe_lid", "params": {"estimators": ["length"], **params}}]
    with pytest.raises(ConfigError, match=r"reward\.terms\[0\]\.params\." + match):
        build_reward_terms(terms)


def test_local_judge_estimator_runs_on_the_tiny_model():
    judge = {"backend": "local", "device": "cpu", "model": {"source": "tiny_random"}}
    reward = make(target="de", target_column=None, estimators=["judge", "heuristic"], judge=judge)
    out = reward(["p"] * 2, ["Das Haus ist gross und alt.", SRC], source=[SRC, SRC])
    assert out[1] == 0.0 and reward.judge.stats["calls"] == 1  # the gated-out row never reaches the judge
    assert (1 / 1.08) / 2 < out[0] < (1 / 1.08 + 1) / 2  # the mean of heuristic 1/1.08 and P(Yes) in (0, 1)


def test_milmmt_recipe_runs_one_step_on_the_tiny_model(tmp_path):
    rows = one_step("milmmt_mt", tmp_path, "reward.terms.0.params.judge.model.source=tiny_random")
    logged = {k: v for row in rows for k, v in row.items()}
    assert "eval/chrf" in logged and math.isfinite(logged["eval/chrf"])
    assert 0.0 <= logged["qe_lid/gate"] <= 1.0 and "rewards/qe_lid/mean" in logged


def classifier_folder(out, seed: int):
    """A 1-label sequence classifier on the tiny random model's config and tokenizer (score head and weights
    drawn with ``seed``): a real QE model folder without train-rm metadata."""
    folder = tiny_random_folder(ModelConfig(source="tiny_random"))
    config = AutoConfig.from_pretrained(folder, num_labels=1)
    torch.manual_seed(seed)
    model = AutoModelForSequenceClassification.from_config(config)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def qe_classifier(tmp_path_factory):
    return classifier_folder(tmp_path_factory.mktemp("qe"), seed=0)


def direct_q(folder, source: str, translation: str) -> float:
    """sigmoid(logit) of a metadata-less classifier folder on "source\ntranslation", by a direct forward."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    with torch.no_grad():
        ids = tok(f"{source}\n{translation}", add_special_tokens=False, return_tensors="pt")["input_ids"]
        return torch.sigmoid(model(input_ids=ids).logits[0, 0]).item()


def test_model_estimator_scores_source_and_translation_with_the_classifier(qe_classifier):
    reward = make(
        target="de", target_column=None, estimators=["model"], qe_models=[str(qe_classifier)], qe_kind="classifier"
    )
    outs = ["Das Haus ist gross und alt.", SRC]
    rewards = reward(["p"] * 2, outs, source=[SRC, SRC])
    # the score is sigmoid(logit) of the classifier on "source\ntranslation"; the copy is gated out (0)
    expected = direct_q(qe_classifier, SRC, outs[0])
    assert rewards == pytest.approx([expected, 0.0], abs=1e-5)
    assert 0.0 < rewards[0] < 1.0


def test_comet_kind_says_what_to_install_and_feeds_comet_src_and_mt(monkeypatch):
    if importlib.util.find_spec("comet") is None:  # the offline default: a clear error before anything loads
        with pytest.raises(ConfigError, match="pip install unbabel-comet"):
            make(target="de", target_column=None, estimators=["model"], qe_models=["Unbabel/wmt22-cometkiwi-da"])
    # COMET and its checkpoints cannot be installed or downloaded here: a stand-in package checks the wiring
    seen = []

    class Checkpoint:
        def predict(self, data, batch_size, gpus, progress_bar):
            seen.extend(data)
            return types.SimpleNamespace(scores=[1.3, -0.2][: len(data)])

    comet = types.ModuleType("comet")
    comet.download_model = lambda name: f"/cache/{name}.ckpt"
    comet.load_from_checkpoint = lambda path: Checkpoint()
    monkeypatch.setitem(sys.modules, "comet", comet)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "comet" else None)
    reward = make(target="de", target_column=None, estimators=["model"], qe_models=["Unbabel/wmt22-cometkiwi-da"])
    out = reward(["p"] * 2, ["Das Haus ist gross und alt.", "Das Haus ist alt."], source=[SRC, "The house is old."])
    assert seen == [
        {"src": SRC, "mt": "Das Haus ist gross und alt."},
        {"src": "The house is old.", "mt": "Das Haus ist alt."},
    ]
    assert out == [1.0, 0.0]  # COMET scores clipped to [0, 1]


def test_two_qe_models_average_in_one_term_by_hand(qe_classifier, tmp_path):
    """MiLMMT's reward in one qe_lid term: gate * mean over two QE models (and here the length estimator):
    r = gate * (q_a + q_b + length) / 3, each model its own term; ``qe_lid/model_<i>`` logs each."""
    other = classifier_folder(tmp_path / "qe_b", seed=1)
    reward = make(
        target_column="target_lang",
        estimators=["model", "length"],
        qe_models=[str(qe_classifier), str(other)],
        qe_kind="classifier",
    )
    assert reward.terms() == ["model_0", "model_1", "length"]
    outs = ["Das Haus ist gross und alt.", "Das Haus ist gross und alt.", "La maison est grande et vieille."]
    logged = {}
    got = reward(
        ["p"] * 3,
        outs,
        source=[SRC] * 3,
        target_lang=["de", "fr", "fr"],
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    qa = [direct_q(qe_classifier, SRC, y) for y in outs]
    qb = [direct_q(other, SRC, y) for y in outs]
    assert abs(qa[0] - qb[0]) > 1e-3  # two different models, so the mean is not either one
    # row 0: German for de, gate 1: (qa + qb + 1/1.08) / 3 (length: 27 chars of 25 -> 1 / 1.08)
    # row 1: German for fr, gate 0 -> 0
    # row 2: French for fr, gate 1: (qa + qb + 25/32) / 3 (32 chars of 25)
    expected = [(qa[0] + qb[0] + 1 / 1.08) / 3, 0.0, (qa[2] + qb[2] + 25 / 32) / 3]
    assert got == pytest.approx(expected, abs=1e-5)
    assert logged["qe_lid/model_0"] == pytest.approx((qa[0] + qa[2]) / 2, abs=1e-5)  # over the gated-in rows
    assert logged["qe_lid/model_1"] == pytest.approx((qb[0] + qb[2]) / 2, abs=1e-5)
