"""Bad input added by the reliability work (docs/errors.md): exit code 2, one line, no run directory.

Output folder not writable, malformed YAML, pickle-only model folder, bad failure policies, bad
``resume=`` targets. Cases run in-process through ``rlpost.cli.main`` with Hydra's launcher replaced
by a tripwire (the ``no_launch`` fixture), like tests/config/test_config_errors.py.
"""

from __future__ import annotations

import sys

import pytest

from rlpost import cli

from support.config import assert_clean_failure

# (id, argv with {tmp} for the test's folder, substrings of the message)
CASES = [
    (
        "output-dir-is-a-file",
        ["train", "hydra.run.dir={tmp}/a_file/run"],
        ["hydra.run.dir={tmp}/a_file/run", "is a file, not a folder"],
    ),
    (
        "output-dir-not-writable",
        ["train", "hydra.run.dir=/proc/rlpost-run"],
        ["hydra.run.dir=/proc/rlpost-run", "cannot write in /proc", "choose a writable output folder"],
    ),
    (
        "sweep-dir-not-writable",
        ["train", "-m", "seed=0,1", "hydra.sweep.dir=/proc/rlpost-sweep"],
        ["hydra.sweep.dir=/proc/rlpost-sweep", "cannot write in /proc"],
    ),
    (
        "bad-yaml",
        ["train", "hydra.searchpath=[file://{tmp}/conf]", "recipe=broken"],
        ["Bad YAML in {tmp}/conf/recipe/broken.yaml line 3, column 6", "expected ',' or ']', but got ':'"],
    ),
    (
        "reward-on-failure-invalid",
        ["train", "reward.on_failure=ignore"],
        ["Invalid value reward.on_failure='ignore'. Valid choices: skip, zero, abort."],
    ),
    (
        "term-on-failure-invalid",
        ["train", "+reward.terms.0.on_failure=never"],
        ["Invalid value reward.terms[0].on_failure='never'. Valid choices: skip, zero, abort."],
    ),
    ("reward-timeout-zero", ["train", "reward.timeout_s=0"], ["reward: timeout_s must be > 0 or null, got 0"]),
    (
        "on-bad-row-invalid",
        ["train", "data=jsonl", "data.path={tmp}/d.jsonl", "data.on_bad_row=ignore"],
        ["Invalid value data.on_bad_row='ignore'. Valid choices: fail, skip."],
    ),
    (
        "max-prompt-chars-zero",
        ["train", "data=jsonl", "data.path={tmp}/d.jsonl", "data.max_prompt_chars=0"],
        ["data.max_prompt_chars must be >= 1 or null, got 0"],
    ),
    (
        "pickle-only-model",
        ["train", "model=hf", "model.path={tmp}/binmodel"],
        ["holds only pickle weights (pytorch_model.bin)", "model.safetensors_only=false"],
    ),
    (
        "resume-nowhere",
        ["train", "resume={tmp}/nope"],
        ["resume='{tmp}/nope' is neither a run directory nor a checkpoint folder (or use resume=auto)."],
    ),
    (
        "resume-incomplete-checkpoint",
        ["train", "resume={tmp}/run/checkpoints/checkpoint-4"],
        ["incomplete checkpoint (no trainer_state.json or model weights)"],
    ),
    (
        "resume-run-without-checkpoint",
        ["train", "resume={tmp}/empty_run"],
        ["the run directory holds no complete checkpoint"],
    ),
]


@pytest.fixture
def inputs(no_launch):  # noqa: F811
    tmp = no_launch
    (tmp / "a_file").write_text("not a folder")
    (tmp / "conf" / "recipe").mkdir(parents=True)
    (tmp / "conf" / "recipe" / "broken.yaml").write_text("train:\n  steps: [1\n  bad: : x\n")
    (tmp / "d.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    (tmp / "binmodel").mkdir()
    (tmp / "binmodel" / "config.json").write_text("{}")
    (tmp / "binmodel" / "pytorch_model.bin").write_bytes(b"pickle")
    (tmp / "run" / "checkpoints" / "checkpoint-4").mkdir(parents=True)
    (tmp / "run" / "checkpoints" / "checkpoint-4" / "model.safetensors").write_bytes(b"w")
    (tmp / "empty_run" / "checkpoints").mkdir(parents=True)
    return tmp


@pytest.mark.parametrize(("argv", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_reliability_bad_input_fails_cleanly(inputs, capsys, argv, expected):
    if "/proc" in " ".join(argv) and not sys.platform.startswith("linux"):
        pytest.skip("uses /proc as an unwritable folder")
    fill = lambda s: s.replace("{tmp}", str(inputs))  # noqa: E731
    code = cli.main([fill(a) for a in argv])
    captured = capsys.readouterr()
    assert_clean_failure(code, captured.err, [fill(e) for e in expected], inputs)
    assert not (inputs / "multirun").exists()


def test_show_reports_bad_yaml_too(inputs, capsys):
    code = cli.main(["show", f"hydra.searchpath=[file://{inputs}/conf]", "recipe=broken"])
    assert_clean_failure(code, capsys.readouterr().err, ["Bad YAML in", "broken.yaml line 3"], inputs)
