"""Runs that stop: preemption with 2 processes, a fresh start after an early kill, and runs that cannot
continue (a corrupted checkpoint, a full disk, a removed run directory, a read-only checkpoint folder).

Each is the real ``rlpost train`` on the tiny random model. A run that cannot continue says why in one
line (``rlpost: stopped: ...``, exit code 1, no traceback) and leaves its last checkpoint loadable.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess

import pytest

from rlpost.core.errors import EXIT_PREEMPTED, RunStopped
from rlpost.runs.checkpoints import is_complete, latest_checkpoint

from support.runs import NOT_COMPARED, finish, launch, metrics, wait_for

TWO = ["hardware.num_processes=2", "hardware.device=cpu", "hardware.precision=fp32"]


def assert_same_metrics(want: list[dict], got: list[dict]) -> None:
    assert [m["step"] for m in got] == [m["step"] for m in want]
    for a, b in zip(want, got):
        keys = {k for k, v in a.items() if isinstance(v, (int, float)) and k not in NOT_COMPARED}
        assert keys <= set(b), keys - set(b)
        for key in keys:
            assert math.isclose(b[key], a[key], rel_tol=1e-6, abs_tol=1e-6), (a["step"], key, a[key], b[key])
    assert any(m["grad_norm"] > 0 for m in want), "no step had a gradient: the comparison would be vacuous"


def stopped_line(err: str) -> str:
    """The one line a stopped run prints; no traceback around it."""
    assert "Traceback" not in err, err[-3000:]
    (line,) = [line for line in err.splitlines() if line.startswith("rlpost: stopped:")]
    return line


@pytest.mark.slow
def test_two_processes_sigterm_stop_together_and_resume_exactly(tmp_path):
    """SIGTERM to ``rlpost train hardware.num_processes=2``: both ranks finish the same step, one
    complete checkpoint (both RNG files), exit 75; the same command with resume=auto continues it to
    the metrics of an uninterrupted 2-process run."""
    args = [*TWO, "train.steps=8", "train.save_steps=0", "resume=auto"]
    code, _, err = finish(
        launch(tmp_path, *args, "hardware.main_process_port=29651", f"hydra.run.dir={tmp_path / 'a'}")
    )
    assert code == 0, err[-3000:]

    run = tmp_path / "b"
    command = [*args, "hardware.main_process_port=29652", f"hydra.run.dir={run}"]
    proc = launch(tmp_path, *command)
    wait_for(lambda: (run / "metrics.jsonl").is_file() and bool(metrics(run)), proc)
    proc.send_signal(signal.SIGTERM)  # to the launching process only: it forwards the signal
    code, out, err = finish(proc)
    assert code == EXIT_PREEMPTED, err[-3000:]
    (checkpoint,) = (run / "checkpoints").glob("*checkpoint-*")  # one, and no staging folder left
    assert is_complete(checkpoint) and {"rng_state_0.pth", "rng_state_1.pth"} <= {p.name for p in checkpoint.iterdir()}
    step = json.loads((checkpoint / "trainer_state.json").read_text())["global_step"]
    assert 1 <= step < 8
    # every rank stopped after the same step: both name the same checkpoint
    assert (out + err).count(f"preempted by SIGTERM; checkpoint {checkpoint}") == 2
    assert [m["step"] for m in metrics(run)] == list(range(1, step + 1))

    code, _, err = finish(launch(tmp_path, *command))
    assert code == 0, err[-3000:]
    assert f"from {checkpoint.name}" in err
    assert_same_metrics(metrics(tmp_path / "a"), metrics(run))


@pytest.mark.slow
def test_fresh_start_after_a_kill_before_the_first_checkpoint_keeps_no_rows(tmp_path):
    run = tmp_path / "run"
    args = ["eval.at_start=true", "train.steps=3", "resume=auto", f"hydra.run.dir={run}"]
    proc = launch(tmp_path, *args, "train.steps=40")
    wait_for(lambda: (run / "metrics.jsonl").is_file() and bool(metrics(run)), proc)
    proc.send_signal(signal.SIGKILL)
    finish(proc)
    assert not latest_checkpoint(run / "checkpoints")
    code, _, err = finish(launch(tmp_path, *args))
    assert code == 0, err[-3000:]
    assert f"starting fresh in {run}: removed metrics.jsonl" in err
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "eval/reward" in r] == [0]  # the dead attempt's step-0 row is gone
    assert [m["step"] for m in metrics(run)] == [1, 2, 3]


@pytest.mark.slow
def test_corrupted_trainer_state_is_skipped_for_the_previous_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = ["train.steps=4", "train.save_steps=2", "train.save_total_limit=3", "resume=auto", f"hydra.run.dir={run}"]
    code, _, err = finish(launch(tmp_path, *args))
    assert code == 0, err[-3000:]
    reference = metrics(run)
    (run / "checkpoints" / "checkpoint-4" / "trainer_state.json").write_text('{"global_step": 4, "log_hi')
    code, _, err = finish(launch(tmp_path, *args))
    assert code == 0, err[-3000:]
    assert "checkpoint-4 skipped: trainer_state.json is unreadable (JSONDecodeError" in err
    assert "using checkpoint-2" in err and "continuing" in err and "from checkpoint-2" in err
    assert_same_metrics(reference, metrics(run))  # steps 3-4 trained again, each logged once
    assert is_complete(run / "checkpoints" / "checkpoint-4")  # rewritten whole


@pytest.mark.slow
def test_run_directory_removed_mid_run_stops_with_one_line(tmp_path):
    run = tmp_path / "run"
    proc = launch(tmp_path, "train.steps=200", "train.save_steps=0", f"hydra.run.dir={run}")
    wait_for(lambda: (run / "metrics.jsonl").is_file() and bool(metrics(run)), proc)
    shutil.rmtree(run)
    code, _, err = finish(proc)
    assert code == RunStopped.exit_code
    assert f"the run directory {run} was removed while the run was going" in stopped_line(err)
    assert not run.exists()  # not silently recreated


@pytest.mark.slow
def test_read_only_checkpoint_folder_stops_and_keeps_the_last_checkpoint(tmp_path):
    """``chattr +i`` makes the folder read-only even for root (permission bits do not stop root)."""
    run = tmp_path / "run"
    proc = launch(tmp_path, "train.steps=200", "train.save_steps=2", f"hydra.run.dir={run}")
    wait_for(lambda: latest_checkpoint(run / "checkpoints") is not None, proc)
    folder = run / "checkpoints"
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        proc.kill()
        pytest.skip("chattr +i is not available here (needs root and ext4/xfs)")
    try:
        code, _, err = finish(proc)
        last = latest_checkpoint(folder)
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)
    assert code == RunStopped.exit_code
    line = stopped_line(err)
    assert "could not be written" in line and f"the last complete checkpoint is {last}" in line
    assert "resume=auto" in line
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(last, use_safetensors=True)  # loadable
    assert sum(p.numel() for p in model.parameters()) > 0


@pytest.fixture
def small_disk(tmp_path):
    """A 200 MB tmpfs: a real ENOSPC when it is filled (skips where mounting is not allowed)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_disk_full_during_the_final_save_keeps_the_last_checkpoint(small_disk, monkeypatch):
    """The disk fills up right before ``checkpoints/final`` is written (a filler file takes every free
    byte): the run stops with one line, the last checkpoint stays loadable, no half-written final."""
    import rlpost.train as train_module
    from rlpost.app import compose

    from support.trainer import HASH_REWARD, TINY

    real_save = train_module._save_final

    def fill_disk_then_save(trainer, checkpoints):
        with open(small_disk / "filler", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * (1 << 20))
                    f.flush()
            except OSError:
                pass
        real_save(trainer, checkpoints)

    monkeypatch.setattr(train_module, "_save_final", fill_disk_then_save)
    run = small_disk / "run"
    cfg = compose(
        [*TINY, HASH_REWARD, "train.steps=2", "train.save_steps=2", "eval.at_start=false", "eval.at_end=false"]
    )
    with pytest.raises(RunStopped) as stopped:
        train_module.train(cfg, run)
    message = str(stopped.value)
    assert "\n" not in message and "final could not be written" in message and "No space left on device" in message
    assert f"the last complete checkpoint is {run / 'checkpoints' / 'checkpoint-2'}" in message
    assert not (run / "checkpoints" / "final").exists() and not (run / "checkpoints" / ".tmp-final").exists()
    (small_disk / "filler").unlink()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "checkpoint-2", use_safetensors=True)
    assert sum(p.numel() for p in model.parameters()) > 0


ENV_TERM = "reward.terms=[{name: env}]"
BROKEN = {  # a failure on every sample, from each place a reward can fail; what the first message must say
    "env-reset-raises": (
        ["data/env=callable", "data.env.path=support.envs:RaisesOnReset", ENV_TERM],
        ["reward term 'env' failed on 8 of 8 samples at step 1", "RuntimeError: the environment could not start",
         "support/envs.py:", "in reset)"],
    ),
    "env-step-wrong-type": (
        ["data/env=callable", "data.env.path=support.envs:WrongStepType", ENV_TERM],
        ["reward term 'env' failed on 8 of 8 samples at step 1", "WrongStepType.step returned str"],
    ),
    "env-step-timeout": (
        ["data/env=callable", "data.env.path=support.envs:SlowStep", "data.env.step_timeout_s=0.2", ENV_TERM],
        ["reward term 'env' failed on 8 of 8 samples at step 1", "env.step ran past 0.2 s"],
    ),
    "reward-raises": (
        ["reward.terms=[{name: callable, params: {path: 'support.faults:always_raises'}}]"],
        ["reward term 'callable' failed on 8 of 8 samples at step 1", "KeyError: 'gold_answer'",
         "support/faults.py:", "in always_raises)"],
    ),
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_reward_that_fails_on_every_sample_stops_the_run(tmp_path, case):
    args, expected = BROKEN[case]
    code, _, err = finish(launch(tmp_path, "train.steps=2", "train.completions_per_step=8", *args))
    assert code == RunStopped.exit_code, err[-3000:]
    line = stopped_line(err)
    for text in ["every sample failed for 1 step(s) (reward.breaker.all_failed_steps=1)", *expected]:
        assert text in line, (text, line)
    assert "All reward functions returned None" not in err  # TRL's dump of whole rows is gone
    (run,) = [p.parent for p in (tmp_path / "outputs").glob("*/*/summary.json")]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 0 and summary["checkpoint"] == "" and "failed on 8 of 8" in summary["stopped"]
