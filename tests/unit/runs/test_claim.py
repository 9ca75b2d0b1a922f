"""One run, one directory (rlpost/runs/claim.py): racing processes get distinct fresh folders, a named
folder is refused while a live run holds it, and a dead run's lock is taken over."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys

import pytest

from rlpost.core.errors import ConfigError
from rlpost.runs import claim


def _claim_in_a_process(base: str, start: multiprocessing.synchronize.Event, out: multiprocessing.Queue) -> None:
    start.wait()
    folder = claim.claim_fresh(base)
    out.put((str(folder), json.loads((folder / claim.LOCK).read_text())["pid"] == os.getpid()))


def test_racing_processes_claim_distinct_fresh_directories(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    base = tmp_path / "outputs" / "2026-12-07" / "13-11-14"  # what four launches in one second resolve to
    procs = [ctx.Process(target=_claim_in_a_process, args=(str(base), start, out)) for _ in range(4)]
    for p in procs:
        p.start()
    start.set()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    folders = sorted(f for f, _ in got)
    assert folders == sorted(str(base) + s for s in ("", "-1", "-2", "-3"))  # one each, none shared
    assert all(own for _, own in got)  # each lock names the process that created the folder
    assert not any((tmp_path / "outputs" / "2026-12-07" / os.path.basename(f) / claim.LOCK).exists() for f in folders)


def test_a_named_directory_is_refused_while_a_live_run_holds_it(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (folder / claim.LOCK).write_text(json.dumps({"host": socket.gethostname(), "pid": holder.pid}))
        with pytest.raises(
            ConfigError, match=rf"hydra.run.dir={folder} is in use by another rlpost run .*pid {holder.pid}"
        ):
            claim.claim_named(folder)
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its lock is stale and taken over by this process, then released
    assert claim.claim_named(folder) == folder
    assert json.loads((folder / claim.LOCK).read_text())["pid"] == os.getpid()
    claim.release_all()
    assert not (folder / claim.LOCK).exists()


def test_a_fresh_claim_creates_the_folder_and_a_second_in_the_same_process_gets_the_next(tmp_path):
    first, second = claim.claim_fresh(tmp_path / "a"), claim.claim_fresh(tmp_path / "a")
    assert (first.name, second.name) == ("a", "a-1")
    claim.release_all()
    assert sorted(p.name for p in first.iterdir()) == [] and sorted(p.name for p in second.iterdir()) == []
