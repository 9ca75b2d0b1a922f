"""rlpost installed as a wheel (``pip install .``, not editable) runs from an empty folder: its config groups,
recipes and bundled data ship inside the package (rlpost/conf, rlpost/recipes; pyproject.toml)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from support.paths import REPO


@pytest.mark.slow
def test_a_non_editable_install_trains_from_an_empty_directory(tmp_path):
    wheels, venv, work, src = tmp_path / "wheels", tmp_path / "venv", tmp_path / "empty", tmp_path / "src"
    pip = [sys.executable, "-m", "pip"]
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "rlpost", "conf", "recipes"):  # setuptools builds in its source tree
        copy = shutil.copytree if (REPO / name).is_dir() else shutil.copy2
        copy(REPO / name, src / name, **({"symlinks": True} if (REPO / name).is_dir() else {}))
    subprocess.run([*pip, "wheel", str(src), "--no-deps", "-q", "-w", str(wheels)], check=True, capture_output=True)
    (wheel,) = wheels.glob("rlpost-*.whl")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")  # torch & co from this venv, not rlpost
    subprocess.run(
        [*pip, "--python", str(venv / "bin" / "python"), "install", "--no-deps", "-q", str(wheel)], check=True
    )
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # nothing of the checkout on the path
    args = ["model=tiny-random", "train.steps=1", "train.max_completion_length=8", "data.eval_size=8", "eval.size=8",
            "eval.at_start=false", "logging.progress=false", "logging.plots=false", "recipe=default"]  # fmt: skip
    proc = subprocess.run([str(venv / "bin" / "rlpost"), "train", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import rlpost; print(rlpost.__file__)"], cwd=work,
                           env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(site))  # the installed copy ran, not the checkout
    (summary,) = work.glob("outputs/*/*/summary.json")
    assert json.loads(summary.read_text())["steps"] == 1
    assert sorted(p.name for p in work.iterdir()) == ["outputs"]  # nothing but its run directory
