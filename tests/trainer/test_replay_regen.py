"""Replay (logging.replay) written by a real tiny run, and algorithm=regen training from it offline.

One real run (tiny random Llama, 2 steps, the hash reward) records its rollouts; the replay tests
read that run directory, and regen trains 2 steps from it without generating.
"""

from __future__ import annotations

import json
import math
import shutil

import pandas as pd
import pytest
import torch

from rlpost.algorithms.regen import RegenTrainer, truncated_is_weights
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.chat import completion_text
from rlpost.core.errors import ConfigError
from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.runs.replay import COLUMNS, ReplayWriter, as_text, read_meta, tokenizer_fingerprint
from rlpost.train import train

from support.trainer import HASH_REWARD, TINY, grpo_args, rlpost_trainer

NO_EVAL = ["eval.at_start=false", "eval.at_end=false", "logging.plots=false"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A real 2-step run with logging.replay=true: its run directory."""
    run_dir = tmp_path_factory.mktemp("replay") / "run"
    cfg = compose([*TINY, HASH_REWARD, *NO_EVAL, "train.steps=2", "logging.replay=true", "logging.samples_per_step=8"])
    train(cfg, run_dir, ["logging.replay=true"])
    return run_dir


def regen_overrides(*replays) -> list[str]:
    paths = ",".join(f"'{p}'" for p in replays)
    return [*TINY, HASH_REWARD, *NO_EVAL, "algorithm=regen", f"algorithm.replay=[{paths}]", "train.steps=2"]


def test_replay_rows_match_the_samples(recorded):
    files = sorted((recorded / "rollouts").glob("*.parquet"))
    assert [f.name for f in files] == ["step-000000-rank0.parquet", "step-000001-rank0.parquet"]
    frame = pd.concat([pd.read_parquet(f) for f in files], ignore_index=True)
    assert set(COLUMNS) <= set(frame.columns) and "term/callable" in frame.columns
    assert len(frame) == 2 * 8  # every completion of both steps (completions_per_step=8)

    tokenizer = load_tokenizer(build_run(compose([*TINY, HASH_REWARD])).model)
    for _, row in frame.iterrows():
        n = row["length"]
        assert len(row["completion_ids"]) == n == len(row["behaviour_logps"]) and n > 0
        assert all(lp <= 0.0 and math.isfinite(lp) for lp in row["behaviour_logps"])
        text = completion_text(json.loads(row["completion"]))  # chat data: the message list as JSON text
        assert tokenizer.decode(list(row["completion_ids"]), skip_special_tokens=True) == text
    assert sorted(frame.groupby(["policy_version", "group"]).size().unique()) == [4]  # groups of G=4

    samples = [json.loads(line) for line in (recorded / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 16
    for sample in samples:  # samples.jsonl holds the same rollouts, in the same order per step
        same = (frame["policy_version"] == sample["step"]) & (frame["completion"] == as_text(sample["completion"]))
        match = frame[same]
        assert len(match) >= 1, sample["completion"]
        row = match.iloc[0]
        assert row["length"] == sample["length"] and bool(row["truncated"]) == sample["truncated"]
        assert row["term/callable"] == pytest.approx(sample["terms"]["callable"])
        assert row["reward"] == pytest.approx(sample["reward"]) and row["advantage"] == pytest.approx(
            sample["advantage"]
        )

    meta = read_meta(recorded / "rollouts")
    assert meta["num_generations"] == 4 and meta["term_names"] == ["callable"] and meta["temperature"] == 1.0
    assert meta["tokenizer_sha256"] == tokenizer_fingerprint(tokenizer)


def test_behaviour_logps_are_the_sampling_policy(recorded):
    """Step 0's rollouts came from the initial weights: a fresh forward of those weights gives their log-probs."""
    run = build_run(compose([*TINY, HASH_REWARD]))
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    row = pd.read_parquet(recorded / "rollouts" / "step-000000-rank0.parquet").iloc[0]
    ids = torch.tensor([list(row["prompt_ids"]) + list(row["completion_ids"])])
    with torch.no_grad():
        logits = model(ids).logits[0, len(row["prompt_ids"]) - 1 : -1] / run.settings.train.temperature
    expected = logits.log_softmax(-1).gather(1, torch.tensor(list(row["completion_ids"]))[:, None])[:, 0]
    assert torch.allclose(torch.tensor(list(row["behaviour_logps"]), dtype=torch.float32), expected, atol=1e-4)
    assert tokenizer.pad_token_id is not None


def test_truncated_is_weights_by_hand():
    # w_t = min(exp(log pi_old - log mu), c) on completion tokens; c = 2.
    current = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.0, 0.0]])
    behaviour = torch.tensor([[-1.0, -3.0, -0.1], [-1.0, -1.0, -9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    weights, metrics = truncated_is_weights(current, behaviour, mask, cap=2.0)
    # row 0: exp(0)=1, exp(1)=2.718 -> 2 (truncated), exp(-0.4)=0.6703; row 1: exp(-2)=0.1353, exp(0)=1, pad -> 1
    expected = torch.tensor([[1.0, 2.0, math.exp(-0.4)], [math.exp(-2.0), 1.0, 1.0]])
    assert torch.allclose(weights, expected, atol=1e-6)
    assert metrics["regen/is_weight_mean"] == pytest.approx((1 + 2 + math.exp(-0.4) + math.exp(-2) + 1) / 5)
    assert metrics["regen/is_truncated_frac"] == pytest.approx(1 / 5)
    assert metrics["regen/log_ratio_mean"] == pytest.approx((0 + 1 - 0.4 - 2 + 0) / 5)
    assert not weights.requires_grad


def test_regen_trains_from_the_replay_without_generating(recorded, tmp_path):
    run = build_run(compose(regen_overrides(recorded)))
    model, tokenizer = load_model(run.model), load_tokenizer(run.model)
    calls = []
    model.generate = lambda *a, **k: calls.append(1)  # any generation would be recorded here
    train_set, _ = load_datasets(run.data)
    trainer = RegenTrainer(
        model=model, args=grpo_args(run, tmp_path), train_dataset=train_set, processing_class=tokenizer, run=run
    )
    assert len(trainer.train_dataset) == 4  # the replay's 4 groups (2 steps x 2 prompts), not the data
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer.train()
    assert calls == []
    logs = [log for log in trainer.state.log_history if "loss" in log]
    assert len(logs) == 2
    for log in logs:
        assert math.isfinite(log["loss"]) and math.isfinite(log["grad_norm"]) and log["grad_norm"] > 0
        assert 0 < log["regen/is_weight_mean"] <= 2.0 and math.isfinite(log["regen/log_ratio_mean"])
        assert math.isfinite(log["rlpost/advantage/std"]) and log["rlpost/advantage/std"] > 0
    moved = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert len(moved) > len(before) // 2


def test_regen_through_train_writes_a_run(recorded, tmp_path):
    summary = train(compose(regen_overrides(recorded, recorded / "rollouts")), tmp_path / "regen", [])
    assert summary["steps"] == 2 and summary["algorithm"] == "regen"
    assert not (tmp_path / "regen" / "rollouts").exists()


def test_regen_config_errors(recorded, tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.replay\[0\]=.*no such folder"):
        build_run(compose(regen_overrides(tmp_path / "nowhere")))
    with pytest.raises(ConfigError, match="holds no replay"):
        build_run(compose(regen_overrides(tmp_path)))
    with pytest.raises(ConfigError, match="Missing required value algorithm.replay"):
        build_run(compose([*TINY, "algorithm=regen"]))
    with pytest.raises(ConfigError, match="set train.num_generations=4"):
        build_run(compose([*regen_overrides(recorded), "train.num_generations=2"]))
    with pytest.raises(ConfigError, match="temperature"):
        build_run(compose([*regen_overrides(recorded), "train.temperature=0.7"]))
    with pytest.raises(ConfigError, match="no reward term 'exact_match'.*replay's: callable"):
        build_run(compose([*TINY, "reward=exact_match", "algorithm=regen", f"algorithm.replay=['{recorded}']"]))
    with pytest.raises(ConfigError, match="logging.replay=true"):
        build_run(compose([*regen_overrides(recorded), "logging.replay=true"]))
    with pytest.raises(ConfigError, match="is_cap"):
        build_run(compose([*regen_overrides(recorded), "algorithm.regen.is_cap=0"]))

    gepo = build_run(
        compose([*TINY, HASH_REWARD, "algorithm=gepo", f"+algorithm.replay=['{recorded}']", "algorithm.trainer=regen"])
    )
    assert gepo.algorithm.offline.config.is_cap == 2.0  # any bundle trains offline with a replay

    other = tmp_path / "other"  # the same replay, recorded with another tokenizer
    shutil.copytree(recorded / "rollouts", other)
    meta = read_meta(other)
    (other / "meta.json").write_text(json.dumps({**meta, "tokenizer_sha256": "0" * 64, "tokenizer": "gpt2"}))
    run = build_run(compose(regen_overrides(other)))
    with pytest.raises(ConfigError, match="tokenizer 'gpt2'"):
        run.algorithm.offline.check_tokenizer(load_tokenizer(run.model))


def test_replay_reuses_trls_rollout_logps(tmp_path):
    """With num_iterations=2 TRL computes old_per_token_logps itself: the replay stores those, no extra forward."""
    run = build_run(compose([*TINY, HASH_REWARD, "train.num_iterations=2", "train.steps=1"]))
    trainer = rlpost_trainer(run, tmp_path, replay=ReplayWriter(tmp_path / "rollouts"))
    extra_forwards = []
    sampling_logps = trainer._sampling_logps
    trainer._sampling_logps = lambda *a, **k: extra_forwards.append(1) or sampling_logps(*a, **k)
    fresh = load_model(run.model)  # the weights that sampled step 0
    trainer.train()
    assert extra_forwards == []
    frame = pd.read_parquet(tmp_path / "rollouts" / "step-000000-rank0.parquet")
    assert len(frame) == 8
    for _, row in frame.iterrows():
        ids = torch.tensor([list(row["prompt_ids"]) + list(row["completion_ids"])])
        with torch.no_grad():
            logits = fresh(ids).logits[0, len(row["prompt_ids"]) - 1 : -1]
        expected = logits.log_softmax(-1).gather(1, torch.tensor(list(row["completion_ids"]))[:, None])[:, 0]
        assert torch.allclose(torch.tensor(list(row["behaviour_logps"]), dtype=torch.float32), expected, atol=1e-4)
