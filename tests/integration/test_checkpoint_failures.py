"""A checkpoint that cannot be written (full disk) says so and leaves the last complete one intact; a
checkpoint in the middle of a reused generation batch (num_iterations=2) resumes on the same rollouts;
the sweep summary reads rlpost's own overrides.yaml (there is no .hydra/ copy any more)."""

from __future__ import annotations

import errno

import pytest

from rlpost.analysis.sweep import summarize_sweep
from rlpost.runs.checkpoints import CheckpointWriteError, latest_checkpoint

from support.trainer import make_run, rlpost_trainer, step_logs


def test_disk_full_while_saving_names_the_last_good_checkpoint(tmp_path, monkeypatch):
    run = make_run(["train.steps=2", "train.save_steps=1"])
    trainer = rlpost_trainer(run, tmp_path)
    real_save = trainer._save_optimizer_and_scheduler

    def save_then_fill_disk(output_dir):
        if trainer.state.global_step == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_save(output_dir)

    monkeypatch.setattr(trainer, "_save_optimizer_and_scheduler", save_then_fill_disk)
    with pytest.raises(CheckpointWriteError) as err:
        trainer.train()
    message = str(err.value)
    assert "checkpoint-2 could not be written" in message and "No space left on device" in message
    assert f"the last complete checkpoint is {tmp_path / 'checkpoint-1'}" in message and "resume=auto" in message
    assert latest_checkpoint(tmp_path) == tmp_path / "checkpoint-1"  # the half-written one is never picked up


def test_sweep_summary_reads_the_jobs_overrides(tmp_path):
    for job, seed in (("0", 0), ("1", 1)):
        (tmp_path / job).mkdir()
        (tmp_path / job / "overrides.yaml").write_text(f"- seed={seed}\n")
        (tmp_path / job / "summary.json").write_text('{"after": {"eval/accuracy": 0.5}, "seconds_per_step": 1.0}')
    table = summarize_sweep(tmp_path)
    assert "| 0 | seed=0 |" in table and "| 1 | seed=1 |" in table


def test_resume_mid_reuse_of_a_generation_batch_matches(tmp_path):
    """num_iterations=2: checkpoint-1 lies between the two optimizer steps on one generation batch.
    Resuming from it trains step 2 on the same rollouts and step 3 on the same new ones."""
    args = ["train.steps=3", "train.save_steps=1", "train.save_total_limit=5", "train.num_iterations=2"]
    reference = rlpost_trainer(make_run(args), tmp_path / "a")
    reference.train()
    resumed = rlpost_trainer(make_run(args), tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "a" / "checkpoint-1"))
    want, got = step_logs(reference)[1:], step_logs(resumed)[1:]  # the resumed history starts with step 1's log
    assert [log["step"] for log in got] == [2, 3] == [log["step"] for log in want]
    for a, b in zip(want, got):
        keys = {k for k, v in a.items() if isinstance(v, float) and k != "step_time"}
        assert {"loss", "grad_norm", "entropy"} <= keys <= set(b)
        for key in keys:
            assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-6), key
    assert want[0]["grad_norm"] > 0


def test_sampling_after_resume_needs_the_saved_rng_state(tmp_path):
    """Resuming from checkpoint-1 reproduces step 2 exactly; the same checkpoint without its
    rng_state.pth does not (the rollouts are sampled from another RNG state)."""
    import shutil

    args = ["train.steps=2", "train.save_steps=1", "train.save_total_limit=5"]
    reference = rlpost_trainer(make_run(args), tmp_path / "a")
    reference.train()
    no_rng = tmp_path / "no-rng" / "checkpoint-1"
    shutil.copytree(tmp_path / "a" / "checkpoint-1", no_rng)
    (no_rng / "rng_state.pth").unlink()
    step2 = {}
    for name, checkpoint in (("with", tmp_path / "a" / "checkpoint-1"), ("without", no_rng)):
        trainer = rlpost_trainer(make_run(args), tmp_path / name)
        trainer.train(resume_from_checkpoint=str(checkpoint))
        step2[name] = step_logs(trainer)[-1]
    want = step_logs(reference)[-1]
    assert want["step"] == step2["with"]["step"] == 2
    assert step2["with"]["loss"] == pytest.approx(want["loss"], abs=1e-6)
    assert step2["with"]["rlpost/reward"] == pytest.approx(want["rlpost/reward"], abs=1e-6)
    assert step2["without"]["rlpost/reward"] != pytest.approx(want["rlpost/reward"], abs=1e-6)
