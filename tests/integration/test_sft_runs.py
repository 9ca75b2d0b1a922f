"""``rlpost sft`` through the real CLI on the tiny random model (2-4 steps): the run directory, the parameters
moving, finite metrics, ``resume=auto`` continuing a run step for step, SIGTERM's checkpoint and exit code 75,
and the run read back by ``rlpost train model=hf model.path=<run>/checkpoints/final``, ``rlpost eval run=<run>``
and ``rlpost merge models=[<run>]``."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlpost.models.loading import ModelConfig, tiny_random_folder
from rlpost.runs.checkpoints import is_complete
from rlpost.runs.preemption import EXIT_PREEMPTED

from support.paths import REPO
from support.runs import NOT_COMPARED, TINY_CLI, finish, run_cli, wait_for

SFT = [
    "model=tiny-random",
    "data.train_size=32",
    "data.eval_size=8",
    "eval.size=8",
    "eval.max_new_tokens=8",
    "train.prompts_per_step=4",
    "train.micro_batch_size=2",
    "train.learning_rate=1e-3",
    'target="{expression} = {answer}"',
    "logging.progress=false",
    "logging.trackers=[]",
]


def sft(cwd: Path, *args: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")]),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "rlpost.cli", "sft", *SFT, *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def steps(run: Path) -> list[dict]:
    return [row for row in rows(run) if "grad_norm" in row]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """One finished run: 3 steps, held-out evaluation before and after."""
    tmp = tmp_path_factory.mktemp("sft")
    code, out, err = finish(sft(tmp, "train.steps=3", f"hydra.run.dir={tmp / 'run'}"))
    assert code == 0, err[-4000:]
    assert "eval/accuracy" in out and "3 steps" in out
    return tmp / "run"


def test_the_run_directory_is_rlpost_trains(run):
    for name in ("config.yaml", "overrides.yaml", "metrics.jsonl", "summary.json", "eval_before.json",
                 "eval_items_before.json", "eval_items.json", "plots/training.png"):  # fmt: skip
        assert (run / name).is_file(), name
    final = run / "checkpoints" / "final"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in final.iterdir()}
    summary = json.loads((run / "summary.json").read_text())
    assert summary["algorithm"] == "sft" and summary["steps"] == 3
    for when in ("before", "after"):
        assert {"eval/accuracy", "eval/reward", "eval/mean_length"} <= set(summary[when])
    items = json.loads((run / "eval_items.json").read_text())
    assert len(items) == 8 and {"index", "reward", "correct", "completion"} <= set(items[0])


def test_metrics_are_finite_and_logged_every_step(run):
    logged = steps(run)
    assert [row["step"] for row in logged] == [1, 2, 3]
    for row in logged:
        for key in ("loss", "grad_norm", "learning_rate", "entropy", "mean_token_accuracy", "num_tokens"):
            assert math.isfinite(row[key]), (row["step"], key)
        assert row["grad_norm"] > 0
    assert logged[-1]["loss"] < logged[0]["loss"]  # lr 1e-3 on the same kind of targets
    evals = [row for row in rows(run) if "eval/accuracy" in row]
    assert [row["step"] for row in evals] == [0, 3]


def test_the_parameters_moved(run):
    from safetensors.torch import load_file

    base = load_file(str(tiny_random_folder(ModelConfig(source="tiny_random")) / "model.safetensors"))
    tuned = load_file(str(run / "checkpoints" / "final" / "model.safetensors"))
    assert set(base) == set(tuned)
    moved = [name for name in base if not (base[name] == tuned[name]).all()]
    assert len(moved) > len(base) // 2, moved


def test_the_run_is_read_by_train_eval_and_merge(run, tmp_path):
    final = run / "checkpoints" / "final"
    args = [a for a in TINY_CLI if not a.startswith("model=")]
    run_cli(["train", "model=hf", f"model.path={final}", *args, "eval.at_end=false", f"hydra.run.dir={tmp_path / 'rl'}"], tmp_path)  # fmt: skip
    assert (tmp_path / "rl" / "checkpoints" / "final" / "model.safetensors").is_file()

    run_cli(["eval", f"run={run}", "size=4", "max_new_tokens=8", "progress=false", f"out={tmp_path / 'eval.json'}"], tmp_path)  # fmt: skip
    record = json.loads((tmp_path / "eval.json").read_text())
    assert Path(record["run"]) == run.resolve() and "eval/accuracy" in record["results"]

    merged = tmp_path / "merged"
    run_cli(["merge", f"models=[{run}]", "model=tiny-random", "alpha=0.5", f"out={merged}"], tmp_path)
    assert (merged / "model.safetensors").is_file()
    assert json.loads((merged / "rlpost_merge.json").read_text())["method"] == "linear"


def test_resume_auto_continues_step_for_step(tmp_path):
    """A run killed after checkpoint-2 (here: its later files removed) continues from it with resume=auto and logs
    what an uninterrupted run of the same seed logs."""
    args = ["train.steps=4", "train.save_steps=2", "resume=auto", "eval.at_start=false", "eval.at_end=false",
            "logging.plots=false"]  # fmt: skip
    code, _, err = finish(sft(tmp_path / "a", *args))
    assert code == 0, err[-3000:]
    (reference,) = [p.parent for p in (tmp_path / "a" / "outputs").glob("sft/*/*/config.yaml")]
    killed = tmp_path / "b" / "outputs" / "sft" / "day" / "time"
    shutil.copytree(reference, killed)
    for name in ("checkpoints/checkpoint-4", "checkpoints/final", "summary.json"):
        path = killed / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    assert is_complete(killed / "checkpoints" / "checkpoint-2")

    code, _, err = finish(sft(tmp_path / "b", *args))
    assert code == 0, err[-3000:]
    assert f"resume=auto: continuing {Path('outputs/sft/day/time')} from checkpoint-2" in err
    assert [p.parent for p in (tmp_path / "b" / "outputs").glob("sft/*/*/config.yaml")] == [killed]
    expected, resumed = steps(reference), steps(killed)
    assert [row["step"] for row in resumed] == [1, 2, 3, 4] == [row["step"] for row in expected]
    for want, got in zip(expected[2:], resumed[2:]):  # steps 3 and 4 were trained again
        for key in sorted(k for k, v in want.items() if isinstance(v, (int, float)) and k not in NOT_COMPARED):
            assert math.isclose(got[key], want[key], rel_tol=1e-5, abs_tol=1e-6), (want["step"], key)
    assert (killed / "checkpoints" / "final" / "model.safetensors").is_file()


def test_sigterm_saves_a_checkpoint_and_exits_75(tmp_path):
    args = ["train.steps=400", "eval.at_start=false", "eval.at_end=false", "logging.plots=false"]
    proc = sft(tmp_path, *args, f"hydra.run.dir={tmp_path / 'run'}")
    metrics = tmp_path / "run" / "metrics.jsonl"
    wait_for(lambda: metrics.is_file() and '"grad_norm"' in metrics.read_text(), proc)  # a step was logged
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == EXIT_PREEMPTED, err[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["preempted"] == "SIGTERM" and 1 <= summary["steps"] < 400
    assert is_complete(Path(summary["checkpoint"])) and f"checkpoint-{summary['steps']}" in summary["checkpoint"]


def test_an_sft_run_is_an_f_tis_peer_off_policy_from_the_first_step(run, tmp_path):
    # F-TIS (seed 004 #12) with a heterogeneous peer: the fine-tuned folder of an rlpost sft run (same tokenizer)
    # samples the last completion of each group. A copy of the learner's own start (the recipe's control) is on-policy
    # at step 1 (mismatch 0), so nothing for F-TIS to correct; the specialist is off-policy from the first step.
    from support.trainer import make_run, rlpost_trainer, step_logs

    final = run / "checkpoints" / "final"
    mismatch = {}
    for name, peer in (("start copy", ["algorithm.correction.peer_model=tiny-random"]),
                       ("sft specialist", ["algorithm.correction.peer_model=hf",
                                           f"algorithm.correction.peer_overrides={{path: '{final}'}}"])):  # fmt: skip
        job = make_run(["train.steps=1", "algorithm/correction=f_tis", "algorithm.correction.max_kl=100", *peer])
        trainer = rlpost_trainer(job, tmp_path / name)
        trainer.train()
        (log,) = step_logs(trainer)
        own = log["rlpost/mismatch/logp_abs_diff"]  # the learner's own rows: fp32 rollouts, on-policy up to kernels
        mismatch[name] = (own, log["rlpost/mismatch/peer_logp_abs_diff"], log["rlpost/correction/peer_kl"])
    own, copy, _ = mismatch["start copy"]
    assert own < 0.01 and copy < 0.01  # the start copy is the learner: its rows as on-policy as the learner's own
    own, specialist, kl = mismatch["sft specialist"]
    assert specialist > 10 * max(own, copy) and kl > 0
