"""Killed runs lose nothing that was checkpointed: the real ``rlpost train`` in subprocesses.

- SIGKILL between checkpoints, then ``resume=auto``: step-by-step the same metrics as an
  uninterrupted run of the same seed (to 1e-6 on CPU), which needs the model, optimizer, scheduler,
  RNG states and data position restored; with ``train.staleness=2`` also the batches generated and not
  yet trained on (bit for bit).
- SIGTERM: a checkpoint is saved at the end of the step, the exit code is 75, and the checkpoint
  loads (as a model, and as a run to continue).
- A partial checkpoint (a ``.tmp-`` staging folder, a ``checkpoint-N`` without its trainer state)
  is never picked up.
"""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path

import pytest

from rlpost.core.errors import ConfigError
from rlpost.runs.checkpoints import is_complete, latest_checkpoint, remove_stale_staging, resolve_resume
from rlpost.runs.preemption import EXIT_PREEMPTED

from support.runs import NOT_COMPARED, finish, launch, metrics, run_dirs, wait_for

ENV_EPISODES = [  # episodes whose start depends on the environment's reset seed (rlpost/trainer/episodes.py)
    "data/env=callable",
    "data.env.path=support.envs:CountDown",
    "reward.terms=[{name: env, weight: 1.0}, {name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]",
]


# train.staleness=2 (rlpost/trainer/staleness.py): checkpoint-2 holds the two batches generated at steps 1 and 2, which
# steps 3 and 4 train on (with tis weighing the lag); the resumed run must match bit for bit
STALE = ["train.staleness=2", "algorithm/correction=tis", "algorithm.correction.rollout_precision=null"]


@pytest.mark.parametrize("extra", [[], ENV_EPISODES, STALE], ids=["completions", "env-episodes", "staleness"])
def test_sigkill_between_checkpoints_then_resume_matches_uninterrupted(tmp_path, extra):
    args = ["train.steps=4", "train.save_steps=2", "resume=auto", *extra]
    reference = launch(tmp_path / "a", *args)  # uninterrupted, same seed, in parallel
    killed = launch(tmp_path / "b", *args)

    def checkpoint_2_published():
        dirs = run_dirs(tmp_path / "b")
        return bool(dirs) and (dirs[0] / "checkpoints" / "checkpoint-2").is_dir()

    wait_for(checkpoint_2_published, killed)
    killed.send_signal(signal.SIGKILL)
    assert finish(killed)[0] == -signal.SIGKILL
    (run,) = run_dirs(tmp_path / "b")
    stale = run / "checkpoints" / "checkpoint-2" / "0-rlpost_stale_batches.pt"
    assert stale.is_file() == (extra == STALE)  # one file per rank, only with train.staleness > 0
    assert not (run / "checkpoints" / "checkpoint-4").exists() and not (run / "summary.json").exists()
    # a save interrupted half-way leaves a staging folder: it must be ignored and cleaned up
    partial = run / "checkpoints" / ".tmp-checkpoint-3" / "checkpoint-3"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half a file")

    code, _, err = finish(launch(tmp_path / "b", *args))
    assert code == 0, err[-3000:]
    assert f"resume=auto: continuing {Path('outputs') / run.relative_to(tmp_path / 'b' / 'outputs')}" in err
    assert "from checkpoint-2" in err
    assert run_dirs(tmp_path / "b") == [run]  # continued in place, no second run directory
    assert not (run / "checkpoints" / ".tmp-checkpoint-3").exists()

    code, _, err = finish(reference)
    assert code == 0, err[-3000:]
    expected, resumed = metrics(run_dirs(tmp_path / "a")[0]), metrics(run)
    assert [m["step"] for m in resumed] == [1, 2, 3, 4] == [m["step"] for m in expected]
    assert ("env/turns" in expected[0]) == (extra == ENV_EPISODES)  # the episodes ran (their metrics compared below)
    if extra == STALE:  # the lag and its correction are among the compared metrics; bit for bit here
        assert [m["staleness/lag"] for m in expected] == [0, 1, 2, 2] and expected[3]["rlpost/mismatch/kl"] > 0
        assert [strip(m) for m in resumed] == [strip(m) for m in expected]
    moved = False
    for want, got in zip(expected, resumed):
        keys = {k for k, v in want.items() if isinstance(v, (int, float)) and k not in NOT_COMPARED}
        assert keys <= set(got), keys - set(got)
        for key in sorted(keys):
            assert math.isclose(got[key], want[key], rel_tol=1e-6, abs_tol=1e-6), (
                want["step"],
                key,
                want[key],
                got[key],
            )
        moved = moved or want["grad_norm"] > 0
    assert moved, "no step had a gradient: the comparison would be vacuous"
    assert expected[2]["loss"] != expected[3]["loss"] or expected[2]["reward"] != expected[3]["reward"]


def strip(row: dict) -> dict:
    return {k: v for k, v in row.items() if k not in NOT_COMPARED}


def test_sigterm_saves_a_loadable_checkpoint_and_exits_75(tmp_path):
    proc = launch(tmp_path, "train.steps=50", "train.save_steps=0")
    wait_for(lambda: bool(run_dirs(tmp_path)) and (run_dirs(tmp_path)[0] / "metrics.jsonl").exists(), proc)
    proc.send_signal(signal.SIGTERM)
    code, _, err = finish(proc)
    assert code == EXIT_PREEMPTED, err[-3000:]
    assert "SIGTERM received; saving a checkpoint after this step" in err
    (run,) = run_dirs(tmp_path)
    checkpoint = latest_checkpoint(run / "checkpoints")
    assert checkpoint is not None and is_complete(checkpoint)
    step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    assert 1 <= step < 50 and checkpoint.name == f"checkpoint-{step}"
    assert f"preempted by SIGTERM; checkpoint {checkpoint}" in err
    assert not (run / "checkpoints" / "final").exists()
    assert json.loads((run / "summary.json").read_text())["preempted"] == "SIGTERM"

    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(checkpoint, use_safetensors=True)
    assert sum(p.numel() for p in model.parameters()) > 0
    # and the run continues from it (an explicit run directory may change train.steps)
    code, _, err = finish(launch(tmp_path, f"train.steps={step + 1}", "train.save_steps=0", f"resume={run}"))
    assert code == 0, err[-3000:]
    assert [m["step"] for m in metrics(run)] == list(range(1, step + 2))
    assert (run / "checkpoints" / "final" / "model.safetensors").is_file()


def fake_checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"weights")
    if complete:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return folder


def test_partial_checkpoints_are_never_picked_up(tmp_path):
    config = {"seed": 0, "resume": "auto", "train": {"steps": 4}}
    run = tmp_path / "outputs" / "2026-01-01" / "10-00-00"
    ckpts = run / "checkpoints"
    good = fake_checkpoint(ckpts / "checkpoint-2", 2)
    fake_checkpoint(ckpts / ".tmp-checkpoint-6" / "checkpoint-6", 6)  # killed while saving
    fake_checkpoint(ckpts / "checkpoint-4", 4, complete=False)  # no trainer_state.json
    (run / "config.yaml").write_text("seed: 0\nresume: null\ntrain:\n  steps: 4\n")
    assert latest_checkpoint(ckpts) == good
    assert resolve_resume("auto", config, None, str(tmp_path / "outputs"))[0] == str(run)
    assert remove_stale_staging(ckpts) == [".tmp-checkpoint-6"] and (ckpts / "checkpoint-2").is_dir()
    # another run's settings are not continued by resume=auto, and nothing to resume starts fresh
    other = {**config, "seed": 1}
    folder, message = resolve_resume("auto", other, None, str(tmp_path / "outputs"))
    assert folder is None and "1 with other settings skipped" in message and "starting fresh" in message
    with pytest.raises(ConfigError, match="incomplete checkpoint"):
        resolve_resume(str(ckpts / "checkpoint-4"), config, None)
    with pytest.raises(ConfigError, match="neither a run directory nor a checkpoint folder"):
        resolve_resume(str(tmp_path / "nope"), config, None)
