"""End to end through the real CLI: `rlpost train` on SmolLM2 and a two-job multirun on the tiny model."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support.paths import REPO


def rlpost(args: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "WANDB_MODE": "disabled"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlpost.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, f"rlpost {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


def finite(row: dict, key: str) -> bool:
    return isinstance(row.get(key), (int, float)) and math.isfinite(row[key])


@pytest.mark.slow
def test_train_smollm2_writes_a_complete_run_directory(tmp_path):
    run_dir = tmp_path / "run"
    proc = rlpost(
        [
            "train",
            "train.steps=2",
            "train.num_generations=4",
            "train.completions_per_step=4",
            "train.max_completion_length=16",
            "eval.size=4",
            "eval.batch_size=4",
            f"hydra.run.dir={run_dir}",
        ],
        cwd=tmp_path,
    )
    for name in ("config.yaml", "overrides.yaml", "metrics.jsonl", "samples.jsonl", "summary.json"):
        assert (run_dir / name).is_file(), name
    # a clean first run: no warning from rlpost's files or arguments (third-party ones are filtered by name, with
    # the reason, in rlpost/trainer/core.py)
    warned = [line for line in (proc.stdout + proc.stderr).splitlines() if re.search("warn|deprecat", line, re.I)]
    assert not warned, warned
    assert (run_dir / "plots" / "training.png").stat().st_size > 1000
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*")), "no tensorboard events"

    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        for key in ("loss", "grad_norm", "reward", "entropy", "rlpost/advantage/std", "clip_ratio/region_mean"):
            assert finite(row, key), (key, row)
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert samples and {"prompt", "completion", "reward", "terms", "advantage"} <= set(samples[0])

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2
    assert 0.0 <= summary["before"]["eval/accuracy"] <= 1.0 and 0.0 <= summary["after"]["eval/accuracy"] <= 1.0

    # The trained weights are a normal safetensors model, and training changed them.
    from rlpost.models.bundled import smollm2_folder

    final = load_file(run_dir / "checkpoints" / "final" / "model.safetensors")
    start = load_file(smollm2_folder() / "model.safetensors")
    moved = [k for k in final if not torch.equal(final[k], start[k])]
    assert len(moved) > len(final) // 2, f"only {len(moved)} of {len(final)} tensors changed"


def test_multirun_two_jobs_and_sweep_summary(tmp_path):
    sweep = tmp_path / "sweep"
    rlpost(
        [
            "train",
            "-m",
            "algorithm=grpo,dr_grpo",
            "model=tiny-random",
            "train.steps=2",
            "train.max_completion_length=8",
            "data.train_size=16",
            "data.eval_size=4",
            "eval.size=4",
            "logging.progress=false",
            f"hydra.sweep.dir={sweep}",
        ],
        cwd=tmp_path,
    )
    jobs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert [j.name for j in jobs] == ["0", "1"]
    algorithms = [json.loads((j / "summary.json").read_text())["algorithm"] for j in jobs]
    assert algorithms == ["grpo", "dr_grpo"]
    table = (sweep / "sweep_summary.md").read_text()
    assert "algorithm=grpo" in table and "algorithm=dr_grpo" in table


def test_seed_sweep_compared_with_paired_items(tmp_path):
    """`rlpost train -m algorithm=grpo,dr_grpo seed=0,1` then `rlpost compare dir=...`: every run writes its
    held-out prompts one by one (eval_items.json, their mean is eval/accuracy), and compare pairs them."""
    sweep = tmp_path / "sweep"
    overrides = ["model=tiny-random", "train.steps=2", "train.max_completion_length=8", "data.train_size=16"]
    overrides += ["data.eval_size=4", "eval.size=4", "logging.progress=false", "logging.trackers=[]"]
    rlpost(["train", "-m", "algorithm=grpo,dr_grpo", "seed=0,1", *overrides, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    jobs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert len(jobs) == 4
    for job in jobs:
        items = json.loads((job / "eval_items.json").read_text())
        after = json.loads((job / "summary.json").read_text())["after"]
        assert [i["index"] for i in items] == [0, 1, 2, 3]
        scores = [i["score"] for i in items if i["score"] is not None]
        assert sum(scores) / len(scores) == pytest.approx(after["eval/accuracy"])
        assert len(json.loads((job / "eval_items_before.json").read_text())) == 4
    rlpost(["compare", f"dir={sweep}"], cwd=tmp_path)
    table = (sweep / "compare.md").read_text()
    assert "| algorithm=grpo | 2 |" in table and "| algorithm=dr_grpo | 2 |" in table
    (paired,) = [line for line in table.splitlines() if line.startswith("| algorithm=grpo | algorithm=dr_grpo |")]
    a_better, b_better, ties = (int(c) for c in paired.split("|")[3:6])
    assert a_better + b_better + ties == 8  # 2 paired seeds x 4 prompts
    assert (sweep / "compare.tex").is_file() and (sweep / "compare.png").stat().st_size > 0
    # against a baseline arm, on the files a real run writes: the end-of-run accuracy pairs prompts within seeds
    # (two-level interval), the gain reads eval_items_before.json, a training reduction pairs seeds only
    metrics = "metrics=[eval/accuracy,eval/accuracy:gain,reward:last:2]"
    rlpost(
        ["compare", f"dir={sweep}", "baseline='algorithm=grpo'", metrics, "x_axis=tokens", "expect=higher"],
        cwd=tmp_path,
    )
    found = json.loads((sweep / "compare.json").read_text())
    rows = {(d["metric"], d["at"]): d for d in found["differences"]}
    assert found["baseline"] == "algorithm=grpo" and {d["arm"] for d in found["differences"]} == {"algorithm=dr_grpo"}
    assert (
        rows[("eval/accuracy", "run")]["seeds"] == [0, 1]
        and rows[("eval/accuracy", "run")]["scheme"] == "seeds+prompts"
    )
    assert rows[("eval/accuracy:gain", "run")]["scheme"] == "seeds+prompts"
    assert rows[("reward:last:2", "run")]["scheme"] == "seeds" and ("reward:last:2", "tokens") in rows
    assert all(d["verdict"] in ("reproduced", "opposite", "null") for d in rows.values() if d["low"] is not None)
