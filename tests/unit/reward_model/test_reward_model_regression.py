"""train-rm objective=regression (KARMA, seed 004 #3): the target transform, standardization, ranks and
correlations by hand; feature rendering; the regression loss; a real tiny-random run through the CLI
with and without context_only; the reward_model term reading the features from data columns; and the
bad-input paths (exit 2 before any model loads)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from rlpost import cli
from rlpost.core.errors import ConfigError
from rlpost.core.ranks import average_ranks
from rlpost.models.loading import ModelConfig
from rlpost.reward_model.pairs import RM_META, encode, render, score_ids
from rlpost.reward_model.regression import RightPadding, ValuationTask
from rlpost.reward_model.train import load_classifier
from rlpost.reward_model.valuations import (
    Valuation,
    feature_names,
    pearson,
    read_valuations,
    regression_metrics,
    transform_target,
    with_features,
)
from rlpost.rewards.base import REWARDS
from rlpost.rewards.reward_model import RewardModel

from support.paths import REPO

KARMA = REPO / "recipes" / "data" / "karma_valuations.jsonl"
TINY_RM = ["model=tiny-random", "progress=false", "train.learning_rate=1e-3", "train.batch_size=8"]


def write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_target_transform_ranks_and_correlations_by_hand():
    values = torch.tensor([-3.0, 0.0, 1.0, math.e - 1])
    # sign(v) log(1 + |v|): -log 4, 0, log 2, 1
    assert transform_target(values, "signed_log").tolist() == pytest.approx([-math.log(4), 0.0, math.log(2), 1.0])
    assert transform_target(values, "none").tolist() == values.tolist()
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]  # ties share 3 and 4 (rlpost/core/ranks.py)
    # a = (1, 2, 3), b = (2, 4, 7): centred (-1, 0, 1) and (-7/3, -1/3, 8/3); sum ab = 5, sum a^2 = 2,
    # sum b^2 = 114/9 -> r = 5 / sqrt(2 * 114 / 9) = 0.993399
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 4.0, 7.0])
    assert pearson(a, b) == pytest.approx(5 / math.sqrt(2 * 114 / 9))
    metrics = regression_metrics(a, b)
    # mse = ((1-2)^2 + (2-4)^2 + (3-7)^2) / 3 = 21 / 3 = 7; the ranks agree exactly: spearman 1
    assert metrics["mse"] == pytest.approx(7.0) and metrics["spearman"] == pytest.approx(1.0)
    assert metrics["score_mean"] == 2.0 and metrics["score_std"] == 1.0
    assert pearson(a, torch.ones(3)) == 0.0  # a constant side has no correlation


def test_features_render_as_thread_metadata():
    features = {"subreddit": "AskReddit", "depth": 2}
    messages = with_features("Is the sky blue?", features, conversational=True)
    assert messages == [
        {"role": "system", "content": "Thread metadata: depth=2; subreddit=AskReddit"},  # sorted names
        {"role": "user", "content": "Is the sky blue?"},
    ]
    assert (
        with_features("Is it?", features, conversational=False)
        == "Thread metadata: depth=2; subreddit=AskReddit\nIs it?"
    )
    assert with_features("Is it?", {}, conversational=True) == "Is it?"  # nothing to show


def test_targets_are_standardized_with_the_training_rows():
    rows = [Valuation("p", "r", v) for v in (0.0, math.e - 1, math.e**2 - 1)]  # signed_log -> 0, 1, 2
    settings = SimpleNamespace(context_only=True, data=SimpleNamespace(target_transform="signed_log"))
    task = ValuationTask(settings, None, rows, rows)
    # mean 1, sample std sqrt((1 + 0 + 1) / 2) = 1 -> targets (t - 1) / 1
    assert (task.mean, task.std) == pytest.approx((1.0, 1.0))
    assert task.targets(rows).tolist() == pytest.approx([-1.0, 0.0, 1.0])
    assert task.targets([Valuation("p", "r", -1.0)]).tolist() == pytest.approx([(-math.log(2) - 1.0) / 1.0])


def test_regression_loss_is_the_squared_error_of_the_scalar():
    model, tokenizer = load_classifier(ModelConfig(source="tiny_random"))
    model.config.problem_type = "regression"
    batch = RightPadding(tokenizer.pad_token_id)(
        [{"input_ids": [5, 6, 7], "labels": 0.5}, {"input_ids": [8, 9], "labels": -1.0}]
    )
    assert batch["input_ids"][1].tolist() == [8, 9, tokenizer.pad_token_id] and batch["attention_mask"][1].tolist() == [
        1,
        1,
        0,
    ]
    out = model(**batch)
    s = out.logits[:, 0]
    # mean((s - t)^2) over the batch, t = (0.5, -1.0)
    assert out.loss.item() == pytest.approx(((s - torch.tensor([0.5, -1.0])) ** 2).mean().item(), rel=1e-5)
    # the scalar read at the last real token: the same as score_ids' right-padded scoring
    assert s.tolist() == pytest.approx(
        score_ids(model, [[5, 6, 7], [8, 9]], tokenizer.pad_token_id, 2).tolist(), abs=1e-5
    )


@pytest.mark.parametrize(
    "line, message",
    [
        ({"prompt": "p", "chosen": "a", "rejected": "b"}, "missing field 'response'.*objective=bradley_terry"),
        ({"prompt": "p", "response": "r", "value": "lots"}, "value must be a finite number"),
        ({"prompt": "p", "response": "r", "value": float("inf")}, "value must be a finite number"),
        ({"prompt": "p", "response": "", "value": 1}, "field 'response' must be a non-empty string"),
        ({"prompt": "p", "response": "r", "value": 1, "features": [1]}, "features must be an object"),
    ],
)
def test_bad_valuation_rows_name_file_and_line(tmp_path, line, message):
    path = write(tmp_path / "v.jsonl", [{"prompt": "p", "response": "r", "value": 1}, line])
    with pytest.raises(ConfigError, match=f"v.jsonl line 2: {message}"):
        read_valuations(str(path))


def test_rows_must_share_their_features(tmp_path):
    rows = [Valuation("p", "r", 1.0, {"a": 1}), Valuation("p", "r", 2.0, {"a": 1, "b": 2})]
    with pytest.raises(ConfigError, match=r"row 2 has features \['a', 'b'\], the first row \['a'\]"):
        feature_names(rows, "x.jsonl")


def test_bundled_valuations_are_valid_and_synthetic_by_their_generator():
    rows = read_valuations(str(KARMA))
    heldout = read_valuations(str(KARMA.with_name("karma_valuations_heldout.jsonl")))
    assert len(rows) == 384 and len(heldout) == 96
    assert feature_names(rows, "train") == ["depth", "minutes_after_post", "subreddit"]
    assert not {r.prompt for r in rows} & {r.prompt for r in heldout}  # held-out replies answer unseen posts
    assert min(r.value for r in rows) < 0 < max(r.value for r in rows)  # downvoted and upvoted replies


@pytest.fixture(scope="module")
def regression_runs(tmp_path_factory):
    """Two tiny-random regression RMs through the real CLI: with the features and context-only."""
    tmp = tmp_path_factory.mktemp("rm_regression")
    train = write(tmp / "train.jsonl", KARMA.read_text().splitlines()[:32])
    runs = {}
    for name, extra in (("features", []), ("context_only", ["context_only=true"])):
        run_dir = tmp / name
        argv = ["train-rm", *TINY_RM, "objective=regression", "train.steps=8", f"data.train={train}", *extra]
        assert cli.main([*argv, f"hydra.run.dir={run_dir}"]) == 0
        runs[name] = run_dir
    return runs


def test_train_rm_regression_moves_parameters_and_records_how_to_render(regression_runs):
    for name, run_dir in regression_runs.items():
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["objective"] == "regression" and summary["steps"] == 8 and summary["train_rows"] == 32
        for when in ("before", "after"):
            assert all(math.isfinite(summary[when][k]) for k in ("mse", "pearson", "spearman"))
        losses = [
            row["loss"]
            for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
            if "loss" in row
        ]
        assert len(losses) == 8 and all(math.isfinite(v) for v in losses)
        loaded = AutoModelForSequenceClassification.from_pretrained(run_dir / "model")
        start, _ = load_classifier(ModelConfig(source="tiny_random"))
        assert not torch.equal(loaded.score.weight, start.score.weight)  # the head trained
        assert not torch.equal(
            loaded.model.layers[0].mlp.up_proj.weight, start.model.layers[0].mlp.up_proj.weight
        )  # and the backbone
        meta = json.loads((run_dir / "model" / RM_META).read_text())
        assert meta["objective"] == "regression" and meta["target_transform"] == "signed_log"
        assert meta["context_only"] is (name == "context_only")
        assert meta["features"] == ([] if name == "context_only" else ["depth", "minutes_after_post", "subreddit"])


def test_reward_term_reads_the_features_from_data_columns(regression_runs):
    folder = regression_runs["features"] / "model"
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    prompts, completions = ["My bike got stolen."] * 2, ["So sorry, that's awful.", "lol"]
    columns = {"depth": [1, 3], "minutes_after_post": [5, 400], "subreddit": ["AskReddit", "AskReddit"]}
    term = REWARDS.get("reward_model")(RewardModel.Config(path=str(folder)))
    # the term's score is the classifier's scalar on the text with the thread metadata, as trained
    texts = [
        tok.apply_chat_template(
            [
                {
                    "role": "system",
                    "content": f"Thread metadata: depth={d}; minutes_after_post={m}; subreddit=AskReddit",
                },
                {"role": "user", "content": p},
                {"role": "assistant", "content": c},
            ],
            tokenize=False,
        )
        for p, c, d, m in zip(prompts, completions, columns["depth"], columns["minutes_after_post"])
    ]
    direct = score_ids(model, encode(tok, texts, 256), tok.pad_token_id, 2).tolist()
    assert term(prompts, completions, **columns, answer=["x", "y"]) == pytest.approx(direct, abs=1e-5)
    with pytest.raises(ValueError, match="trained with the rows' features.*no column 'depth'.*context_only=true"):
        term(prompts, completions)
    plain = REWARDS.get("reward_model")(RewardModel.Config(path=str(regression_runs["context_only"] / "model")))
    context = AutoModelForSequenceClassification.from_pretrained(regression_runs["context_only"] / "model").eval()
    texts = [render(tok, p, c, True) for p, c in zip(prompts, completions)]  # the conversation alone
    assert plain(prompts, completions) == pytest.approx(
        score_ids(context, encode(tok, texts, 256), tok.pad_token_id, 2).tolist(), abs=1e-5
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["context_only=true"], "context_only=true is for objective=regression"),
        (
            ["objective=regression", f"data.train={REPO / 'recipes/data/arith_preferences.jsonl'}"],
            "line 1: missing field 'response'",
        ),
        (["objective=ranking"], "objective.*bradley_terry, regression"),
        (["objective=regression", "data.target_transform=log"], "target_transform.*signed_log, none"),
    ],
)
def test_bad_input_exits_2_before_any_load(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert cli.main(["train-rm", "model=tiny-random", *args, f"hydra.run.dir={run_dir}"]) == 2
    assert re.search(message, capsys.readouterr().err)
    assert not run_dir.exists()
