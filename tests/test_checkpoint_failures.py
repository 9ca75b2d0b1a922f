"""A checkpoint that cannot be written (full disk) says so and leaves the last complete one intact;
the sweep summary reads rlpost's own overrides.yaml (there is no .hydra/ copy any more)."""

from __future__ import annotations

import errno

import pytest

from rlpost.checkpoints import CheckpointWriteError, latest_checkpoint
from rlpost.sweep import summarize_sweep

from trainer_utils import make_run, rlpost_trainer


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
