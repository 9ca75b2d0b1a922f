"""Real multi-process runs on CPU (slow): DeepSpeed ZeRO-2 / ZeRO-3 under ``accelerate launch`` with 2
processes (gloo), and a local parallel multirun through the joblib launcher.

Each run goes through the real CLI in a subprocess (``rlpost train hardware=zero2 hardware.num_processes=2``
re-launches itself, rlpost/launch/accelerate.py), on the tiny random model, 2 optimizer steps.
The ZeRO tests skip with a reason when deepspeed is not importable (``pip install 'rlpost[deepspeed]'``;
``make setup`` installs it).
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from support.paths import REPO
from support.runs import QUICK, rlpost

ROOT = REPO
CPU_ZERO = ["hardware.device=cpu", "hardware.precision=fp32", "hardware.num_processes=2"]
needs_deepspeed = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="deepspeed is not importable: pip install 'rlpost[deepspeed]' (make setup installs it)",
)


def initial_weights() -> dict[str, torch.Tensor]:
    from rlpost.app import compose
    from rlpost.core.schema import build_config, to_container
    from rlpost.models.loading import ModelConfig, tiny_random_folder

    cfg = build_config(ModelConfig, to_container(compose(["model=tiny-random"]).model), "model")
    return load_file(str(tiny_random_folder(cfg) / "model.safetensors"))


def check_zero_run(tmp_path: Path, profile: str, stage: int, port: int, *extra: str) -> Path:
    run_dir = tmp_path / "run"
    done = rlpost(
        [
            *QUICK,
            f"hardware={profile}",
            *CPU_ZERO,
            f"hardware.main_process_port={port}",
            f"hydra.run.dir={run_dir}",
            *extra,
        ],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    launch = (run_dir / "launch.sh").read_text()
    assert "accelerate.commands.launch" in launch and "--num_processes 2" in launch and "RLPOST_LAUNCHED=1" in launch
    assert json.loads((run_dir / "deepspeed.json").read_text())["zero_optimization"]["stage"] == stage
    assert done.stdout.count("run directory:") == 2  # both processes ran the job, none re-launched again
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(math.isfinite(r["loss"]) and math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in steps)
    final = run_dir / "checkpoints" / "final"
    after, before = load_file(str(final / "model.safetensors")), initial_weights()
    assert set(before) <= set(after) | {"lm_head.weight"}
    for name, tensor in before.items():  # whole (gathered) tensors, not ZeRO-3 shards
        if name in after:
            assert after[name].shape == tensor.shape, name
    moved = [n for n in before if n in after and not torch.equal(before[n], after[n].to(before[n].dtype))]
    assert len(moved) > len(before) // 2, f"only {moved} moved"
    return final


@pytest.mark.slow
@needs_deepspeed
def test_zero2_two_processes(tmp_path):
    check_zero_run(tmp_path, "zero2", 2, 29631)


@pytest.mark.slow
@needs_deepspeed
def test_zero3_two_processes_saves_a_plain_model(tmp_path):
    from transformers import AutoModelForCausalLM

    final = check_zero_run(tmp_path, "zero3", 3, 29641, "eval.at_end=true")  # eval generates with gathered shards
    run_dir = final.parent.parent
    after = json.loads((run_dir / "summary.json").read_text())["after"]
    assert math.isfinite(after["eval/reward"]) and after["eval/mean_length"] > 0
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum("eval/reward" in r for r in rows) == 1  # rank 0 alone writes the run's files
    assert not list(run_dir.glob(".*.tmp"))
    model = AutoModelForCausalLM.from_pretrained(final)  # plain transformers, no DeepSpeed
    assert all(p.numel() > 0 and torch.isfinite(p).all() for p in model.parameters())
    out = model(torch.tensor([[1, 2, 3]])).logits
    assert out.shape[-1] == model.config.vocab_size and torch.isfinite(out).all()


@pytest.mark.slow
def test_joblib_multirun_two_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["hydra/launcher=local", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    done = rlpost(["-m", *[o for o in QUICK if o != "train.steps=2"], "train.steps=1", *args], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    for job in ("0", "1"):  # each job its own run directory
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["steps"] == 1 and summary["run_dir"] == str(sweep / job)
    table = (sweep / "sweep_summary.md").read_text()
    assert "seed=0" in table and "seed=1" in table


@pytest.mark.slow
def test_submitit_local_multirun_and_summary(tmp_path):
    """The submitit launcher (what hydra/launcher=slurm uses, here its local executor): job folders and
    the sweep summary as with joblib; submitit's own .submitit/ folder is not taken for a job."""
    sweep = tmp_path / "sweep"
    args = [
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=20",
        "seed=0,1",
        f"hydra.sweep.dir={sweep}",
    ]
    done = rlpost(["-m", *[o for o in QUICK if o != "train.steps=2"], "train.steps=1", *args], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert (sweep / ".submitit").is_dir()
    for job in ("0", "1"):
        assert json.loads((sweep / job / "summary.json").read_text())["steps"] == 1
    from rlpost.analysis.sweep import load_jobs

    assert sorted(job.name for job in load_jobs(sweep)) == ["0", "1"]
    table = (sweep / "sweep_summary.md").read_text()  # the callback ran in the launching process
    assert "seed=0" in table and "seed=1" in table


@pytest.mark.slow
def test_optuna_search_two_trials(tmp_path):
    """hydra/sweeper=search: Optuna samples train.learning_rate from an interval, each trial a train job
    (its own run directory) whose returned eval.objective (here the logged training reward) is the
    objective; the best trial's value is the larger of the two jobs' last logged rewards."""
    import yaml

    sweep = tmp_path / "sweep"
    args = ["hydra/sweeper=search", "hydra.sweeper.n_trials=2", "train.learning_rate=interval(1e-3,1e-2)"]
    quick = [o for o in QUICK if o != "train.steps=2" and not o.startswith("train.learning")]
    done = rlpost(["-m", *quick, "train.steps=1", "eval.objective=reward", *args, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    rates, rewards = [], []
    for job in ("0", "1"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["steps"] == 1
        rows = [json.loads(line) for line in (sweep / job / "metrics.jsonl").read_text().splitlines()]
        rewards.append([r["reward"] for r in rows if "reward" in r][-1])
        overrides = yaml.safe_load((sweep / job / "overrides.yaml").read_text())
        rates += [float(o.split("=", 1)[1]) for o in overrides if o.startswith("train.learning_rate=")]
    assert len(rates) == 2 and all(1e-3 <= r <= 1e-2 for r in rates) and rates[0] != rates[1]
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert "train.learning_rate" in best["best_params"]
    assert best["best_value"] == pytest.approx(max(rewards))  # direction: maximize


def test_objective_names_what_the_run_logged(tmp_path):
    from rlpost.core.errors import ConfigError
    from rlpost.evaluation.objective import objective_value
    from rlpost.runs.rundir import RunDirectory

    run = RunDirectory(tmp_path)
    run.append_metrics({"step": 1, "reward": 0.25, "loss": 0.1})
    run.append_metrics({"step": 2, "reward": 0.75, "loss": 0.2})
    summary = {"run_dir": str(tmp_path), "after": {"eval/accuracy": 0.5}}
    assert objective_value(summary, "eval/accuracy") == 0.5
    assert objective_value(summary, "reward") == 0.75  # the last logged value
    assert objective_value({"run_dir": str(tmp_path)}, "eval/accuracy") is None  # no final eval: nothing
    with pytest.raises(
        ConfigError, match="eval.objective=rewrd was not logged by this run; its metrics are: loss, reward"
    ):
        objective_value(summary, "rewrd")
