"""A killed multirun, relaunched with ``resume=auto``, finishes what was not done and redoes nothing
(rlpost/launch/sweep_resume.py).

Fast: what each job folder means (finished, a checkpoint, nothing, other settings) and which earlier
sweep a launch without ``hydra.sweep.dir`` continues, on hand-made folders. Slow: the real
``rlpost train -m`` in subprocesses on the tiny random model, killed part-way (simulated by removing
what the kill would not have written), then relaunched with the same command line.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlpost.analysis.sweep import Job, summary_rows
from rlpost.core.errors import ConfigError
from rlpost.launch.sweep_resume import CONTINUE, FINISHED, FRESH, job_state, resolve_sweep_resume

from support.runs import QUICK, rlpost


def config(seed: int, **extra) -> dict:
    return {"seed": seed, "resume": "auto", "train": {"steps": 2, **extra}}


def make_job(folder: Path, settings: dict, summary: dict | None = None, checkpoint: int | None = None) -> Path:
    """A job folder as a launch leaves it: config.yaml, maybe summary.json and a complete checkpoint."""
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create({**settings, "resume": None})))
    if summary is not None:
        (folder / "summary.json").write_text(json.dumps(summary))
    if checkpoint is not None:
        ckpt = folder / "checkpoints" / f"checkpoint-{checkpoint}"
        ckpt.mkdir(parents=True)
        (ckpt / "model.safetensors").write_bytes(b"weights")
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": checkpoint}))
    return folder


def test_each_job_folder_finished_checkpoint_preempted_or_nothing(tmp_path):
    sweep = tmp_path / "sweep"
    configs = [config(seed) for seed in range(6)]
    make_job(sweep / "0", configs[0], summary={"steps": 2}, checkpoint=2)
    make_job(sweep / "1", configs[1], checkpoint=1)
    make_job(sweep / "2", configs[2], summary={"preempted": "SIGTERM", "steps": 1}, checkpoint=1)
    make_job(sweep / "3", configs[3])  # killed before its first checkpoint
    make_job(sweep / "4", configs[4], summary={"steps": 2})  # finished, train.save_steps=0
    # job 5 never started
    states = [job_state(sweep / str(n), configs[n])[0] for n in range(6)]
    assert states == [FINISHED, CONTINUE, CONTINUE, FRESH, FINISHED, FRESH]
    folder, message = resolve_sweep_resume(configs, str(sweep))
    assert folder == str(sweep)
    assert message == (
        f"resume=auto: sweep {sweep}: jobs 0, 4 finished (skipped); jobs 1-2 continue from their "
        "checkpoints (1: checkpoint-1, 2: checkpoint-1); jobs 3, 5 start fresh."
    )


def test_a_job_folder_with_other_settings_stops_the_launch(tmp_path):
    sweep = tmp_path / "sweep"
    make_job(sweep / "0", config(0), summary={"steps": 2})
    make_job(sweep / "1", config(1, learning_rate=0.1), checkpoint=1)
    with pytest.raises(ConfigError) as err:
        resolve_sweep_resume([config(0), config(1)], str(sweep))
    message = str(err.value)
    assert f"{sweep / '1'} holds a run with other settings (train.learning_rate: 0.1 -> '(absent)')" in message
    assert "new hydra.sweep.dir" in message and "\n" not in message


def test_without_sweep_dir_the_latest_sweep_with_these_settings_is_continued(tmp_path):
    root = tmp_path / "multirun"
    configs = [config(0), config(1)]
    old = make_job(root / "day" / "09-00-00" / "0", configs[0], summary={"steps": 2}).parent
    make_job(old / "1", configs[1], summary={"steps": 2})
    newer = make_job(root / "day" / "10-00-00" / "0", configs[0], summary={"steps": 2}).parent  # killed in job 1
    make_job(root / "day" / "11-00-00" / "0", config(7), summary={"steps": 2})  # other settings
    make_job(root / "day" / "12-00-00" / "2", config(1), summary={"steps": 2})  # job 2 of a larger sweep
    os.utime(old / "1" / "config.yaml", (1, 1))
    os.utime(old / "0" / "config.yaml", (1, 1))
    folder, message = resolve_sweep_resume(configs, None, str(root))
    assert folder == str(newer)
    assert message.endswith("job 0 finished (skipped); job 1 starts fresh.")
    folder, message = resolve_sweep_resume([config(3)], None, str(root))
    assert folder is None and message.endswith("starting a fresh sweep.")


def test_sweep_summary_status_and_resume_is_not_a_setting():
    jobs = [
        Job("0", None, ["seed=0", "resume=auto"], [], summary={"steps": 2}),
        Job("1", None, ["seed=1"], [], summary={"preempted": "SIGTERM", "steps": 1}),
        Job("2", None, ["seed=2", "resume=auto"], []),
    ]
    _, rows = summary_rows(jobs, [], [])
    assert [row[:3] for row in rows] == [
        ["0", "seed=0", "done"],
        ["1", "seed=1", "preempted"],
        ["2", "seed=2", "incomplete"],
    ]


# ---------------------------------------------------------------- the real CLI


def step_rows(job: Path) -> list[int]:
    rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [row["step"] for row in rows if "loss" in row]


@pytest.mark.slow
def test_killed_multirun_resumes_with_the_same_command(tmp_path):
    """Job 0 finished before the kill, job 1 was killed after its checkpoint-1 (step 2 logged, not
    saved), job 2 during its first step. The same command line finishes jobs 1 and 2, leaves job 0's
    files untouched, and the sweep summary lists all three as done; a launch without
    ``hydra.sweep.dir`` finds the sweep under multirun/ and skips every job."""
    sweep = tmp_path / "multirun" / "old"
    command = ["-m", *QUICK, "train.save_steps=1", "seed=0,1,2", "resume=auto", "hydra.sweep.dir=multirun/old"]
    done = rlpost(command, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "resume=auto: sweep multirun/old: jobs 0-2 start fresh." in done.stderr
    # the kill, simulated by removing what it would have prevented
    for name in ("summary.json", "checkpoints/checkpoint-2", "checkpoints/final"):
        shutil.rmtree(sweep / "1" / name) if name.startswith("checkpoints") else (sweep / "1" / name).unlink()
    for name in ("summary.json", "metrics.jsonl", "samples.jsonl"):
        (sweep / "2" / name).unlink(missing_ok=True)
    shutil.rmtree(sweep / "2" / "checkpoints")
    (sweep / "sweep_summary.md").unlink()
    assert step_rows(sweep / "1") == [1, 2]
    kept = {name: (sweep / "0" / name).stat().st_mtime_ns for name in ("metrics.jsonl", "summary.json", "config.yaml")}
    metrics_0 = (sweep / "0" / "metrics.jsonl").read_bytes()
    checkpoint_1 = sweep / "1" / "checkpoints" / "checkpoint-1" / "trainer_state.json"
    checkpoint_1_written = checkpoint_1.stat().st_mtime_ns

    done = rlpost(command, tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    plan = "job 0 finished (skipped); job 1 continues from its checkpoint (1: checkpoint-1); job 2 starts fresh."
    assert f"resume=auto: sweep multirun/old: {plan}" in done.stderr
    assert "resume=auto: job 0 finished earlier" in done.stderr
    assert {name: (sweep / "0" / name).stat().st_mtime_ns for name in kept} == kept  # not re-trained
    assert (sweep / "0" / "metrics.jsonl").read_bytes() == metrics_0
    assert checkpoint_1.stat().st_mtime_ns == checkpoint_1_written  # job 1 continued from it, not from scratch
    for job in ("1", "2"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["steps"] == 2 and "preempted" not in summary
        assert step_rows(sweep / job) == [1, 2]  # each step once: job 1's step 2 was re-run, not repeated
    table = (sweep / "sweep_summary.md").read_text()
    for job in range(3):
        assert f"| {job} | seed={job} | done |" in table

    again = rlpost([o for o in command if not o.startswith("hydra.sweep.dir")], tmp_path)
    assert again.returncode == 0, again.stderr[-4000:]
    assert f"resume=auto: sweep {Path('multirun') / 'old'}: jobs 0-2 finished (skipped)." in again.stderr
    assert sorted(p.name for p in (tmp_path / "multirun").iterdir()) == ["old"]  # no new sweep folder
