"""Shared fixtures: the gpu marker is skipped without CUDA; tiny models are built once per session."""

import os
import subprocess

import pytest
import torch

from support.paths import REPO

# fixtures shared across folders: no_launch (tests/support/config.py); the local judge endpoint `server` and
# its log reset `clear_log` (tests/support/judges.py); `generate_calls`, what TRL was asked to sample (tests/support/rollouts.py)
pytest_plugins = ["support.config", "support.judges", "support.rollouts"]

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config):
    """Under pytest-xdist (make test: -n 2) each worker is one torch thread, and so are the processes it starts:
    two workers of two threads each on a 2-core machine would slow every torch test several times over."""
    if hasattr(config, "workerinput"):
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


# ---- tests write only under their temporary folders ----------------------------------------------------
# What a run of the suite leaves in the checkout beyond these is a test writing where it should not
# (e.g. an in-process `rlpost probe` writing outputs/ into the repository): the session fails and names it.
_CACHES = (".venv/", ".pytest_cache/", ".ruff_cache/", ".mypy_cache/", "rlpost.egg-info/")
_BEFORE: set[str] = set()


def _checkout_leftovers() -> set[str]:
    """Untracked and ignored paths of the checkout (folders as one entry), caches and bytecode left out."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored", "--untracked-files=normal"],
        cwd=REPO, capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    paths = {line[3:] for line in out.splitlines() if line[:2] in ("??", "!!")}
    return {p for p in paths if not p.startswith(_CACHES) and "__pycache__" not in p and not p.endswith(".pyc")}


def pytest_sessionstart(session):
    _BEFORE.update(_checkout_leftovers())


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # xdist: the controller checks once all workers are done
        return
    new = sorted(_checkout_leftovers() - _BEFORE)
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"tests left files in the checkout (write under tmp_path instead): {', '.join(new)}", red=True
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
