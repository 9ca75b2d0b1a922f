"""One writer per path with 2 processes (gloo): every kind of file a run writes (rlpost/runs/ranks.py).

Each test starts two real processes (RANK 0 and 1, as torchrun would) running tests/support/ranks.py:
every repeat both ranks reach the write with a random 0-60 ms skew and call the same rlpost function;
the files on disk must then be exactly one writer's, complete, and no staging or temp file may be left.

How many repeats: the old ``_save_final`` (both ranks deleted ``.tmp-final``, then the main one wrote
it), run by this harness, failed 2 of 100 repeats with the ranks in lockstep and 27 of 300 (9%) with
this skew (FileNotFoundError while the main rank wrote or renamed; measured 2026-12-03). With 60
repeats the old code would pass this test with probability 0.91^60 = 0.4%.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import TESTS

REPEATS = 30
FINAL_REPEATS = 60  # the race this test guards against hit 9% of repeats (module docstring)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_ranks(kind: str, folder: Path, repeats: int = REPEATS) -> dict:
    """Run ``support/ranks.py kind`` on ranks 0 and 1; rank 0's RESULT line."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    env |= {
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "support.ranks", kind, str(folder), str(repeats)],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    outputs = [p.communicate(timeout=600) for p in procs]
    for r, (p, (_, err)) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"rank {r} failed:\n{err[-3000:]}"
    line = next(line for line in outputs[0][0].splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def no_leftovers(names: list[str]) -> bool:
    """No staging folder (.tmp-*) and no temp file (.*.tmp*) of an interrupted or raced write."""
    return not [n for n in names if n.startswith(".tmp-") or (n.startswith(".") and ".tmp" in n)]


@pytest.mark.slow
def test_final_model_has_one_writer(tmp_path):
    result = two_ranks("final_model", tmp_path, repeats=FINAL_REPEATS)
    assert result["final_value"] == FINAL_REPEATS - 1  # the last repeat's weights, complete
    assert result["left"] == ["final"]


@pytest.mark.slow
def test_checkpoints_are_complete_and_rotated(tmp_path):
    result = two_ranks("checkpoints", tmp_path, repeats=12)
    assert result["latest"] == "checkpoint-12"
    assert {"rng_state_0.pth", "rng_state_1.pth", "model.safetensors", "trainer_state.json"} <= set(result["files"])
    assert result["left"] == ["checkpoint-11", "checkpoint-12"]  # save_total_limit=2, nothing staged


def test_run_files_are_written_once(tmp_path):
    result = two_ranks("run_files", tmp_path)
    # one row per repeat: rank 1's calls wrote nothing
    assert result["metrics.jsonl"] == result["samples.jsonl"] == result["events.jsonl"] == REPEATS
    assert result["summary"] == {"steps": REPEATS - 1}
    assert no_leftovers(result["left"])
    assert {"config.yaml", "overrides.yaml", "summary.json", "eval_before.json"} <= set(result["left"])


def test_plots_are_written_once_and_whole(tmp_path):
    result = two_ranks("plots", tmp_path, repeats=10)
    assert result["png"] is True  # a whole PNG: signature and IEND chunk
    assert result["left"] == ["plots"] and no_leftovers(os.listdir(tmp_path / "plots"))


def test_replay_has_one_file_per_rank_and_batch(tmp_path):
    result = two_ranks("replay", tmp_path)
    assert result["rows"] == 2 * REPEATS and result["ranks"] == [0, 1]
    assert len([n for n in result["left"] if n.endswith(".parquet")]) == 2 * REPEATS
    assert "meta.json" in result["left"] and no_leftovers(result["left"])


def test_sweep_summary_has_one_writer(tmp_path):
    result = two_ranks("sweep_summary", tmp_path)
    assert "seed=0" in result["table"] and "seed=1" in result["table"]
    assert {"sweep_summary.md", "sweep_summary.csv"} <= set(result["left"]) and no_leftovers(result["left"])
