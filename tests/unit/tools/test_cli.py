"""The commands themselves: ``rlpost list``, ``rlpost show``, ``rlpost train --cfg job / --help``, ``rlpost --help``.

``list`` and ``show`` run in-process (``rlpost.cli.main``); the Hydra app paths (``--cfg``, ``--help``)
and the console script run in a subprocess, as a user would run them. None of them trains.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlpost import cli
from rlpost.core.registry import describe
from rlpost.tools.listing import REGISTRIES

RLPOST = Path(sys.executable).with_name("rlpost")


def run_cli(args: list[str], cwd: Path, console_script: bool = False) -> subprocess.CompletedProcess:
    command = [str(RLPOST)] if console_script else [sys.executable, "-m", "rlpost.cli"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "250"}
    return subprocess.run([*command, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def wide(monkeypatch, tmp_path):
    monkeypatch.setenv("COLUMNS", "250")  # rich tables do not wrap the descriptions
    monkeypatch.chdir(tmp_path)
    return tmp_path


def table_rows(out: str, first: str = "kind") -> list[list[str]]:
    """The rows of the plain-text section of ``rlpost list`` whose header starts with ``first``: the
    columns start where the header's words start; the section ends at a blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split(" ", 1)[0] == first)
    header = lines[start]
    cuts = [m.start() for m in re.finditer(r"\S+", header)] + [None]
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append([line[a:b].strip() for a, b in zip(cuts, cuts[1:])])
    return rows


def test_list_shows_every_component_with_description(wide, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    rows = {(r[0], r[1]): r for r in table_rows(out)}
    for kind, registry in REGISTRIES.items():
        for name, cls in registry.items():
            row = rows.get((kind, name))
            assert row is not None, f"{kind} {name} missing from rlpost list"
            assert row[2] == describe(cls) and row[2], f"{kind} {name}: description {row[2]!r}"
    names = {name for _, name in rows}
    for name in ("group_norm", "clip", "gspo", "cispo", "entropy", "math_answer", "weighted_sum"):
        assert name in names
    assert len(rows) == sum(len(r.names()) for r in REGISTRIES.values())
    assert "seed" in out.splitlines()[1]  # the seed reference column
    assert rows[("advantage", "group_norm")][3].startswith("seed ")


def test_list_one_kind(wide, capsys):
    assert cli.main(["list", "loss"]) == 0
    rows = table_rows(capsys.readouterr().out)
    assert {r[0] for r in rows} == {"loss"}
    assert {r[1] for r in rows} == set(REGISTRIES["loss"].names())


def test_show_explains_batch_and_loss(wide, capsys):
    assert cli.main(["show", "algorithm=dapo", "train.micro_batch_size=4"]) == 0
    out = capsys.readouterr().out
    config = yaml.safe_load(out.split("\nAlgorithm ")[0])  # the composed config comes first, as YAML
    assert config["algorithm"]["name"] == "dapo" and config["train"]["micro_batch_size"] == 4
    lines = [" ".join(line.split()) for line in out.splitlines()]
    assert "prompts per step 2 (completions_per_step / num_generations)" in lines
    assert "completions per prompt 4 (G, one group)" in lines
    assert "gradient accumulation 2 micro-batch(es) per step" in lines
    assert "completion tokens at most 256 per step (32 per completion)" in lines
    assert any("A = (r - mean_group(r)) / (std_group(r)" in line for line in lines)
    assert any("clip(r, 0.8, 1.28)" in line for line in lines)
    assert any(line.startswith("token-mean: sum_{b,t}(l*m) / N_tok") for line in lines)
    assert any("dynamic sampling" in line for line in lines)
    assert not (wide / "outputs").exists()


def test_show_default_aggregation_and_no_accumulation(wide, capsys):
    assert cli.main(["show", "algorithm=dr_grpo"]) == 0
    lines = [" ".join(line.split()) for line in capsys.readouterr().out.splitlines()]
    assert "gradient accumulation 1 micro-batch(es) per step" in lines
    assert any(
        line.startswith("seq-mean-token-sum-norm: sum_{b,t}(l*m) / (B * max_completion_length)") for line in lines
    )


def test_train_cfg_job_prints_config_without_training(tmp_path):
    proc = run_cli(["train", "--cfg", "job", "model=tiny-random"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    config = yaml.safe_load(proc.stdout)
    assert config["model"]["source"] == "tiny_random"
    assert set(config) >= {"model", "data", "reward", "algorithm", "hardware", "train"}
    assert not (tmp_path / "outputs").exists()


def test_train_help_lists_config_groups(tmp_path):
    proc = run_cli(["train", "--help"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("rlpost train is powered by Hydra.")
    groups = dict(line.split(": ", 1) for line in proc.stdout.split("== Config ==")[0].splitlines() if ": " in line)
    for group in ("model", "data", "reward", "algorithm", "hardware", "algorithm/loss", "algorithm/advantage"):
        assert group in groups, f"group {group} missing from --help"
    assert "clip" in groups["algorithm/loss"].split(", ")
    assert "grpo" in groups["algorithm"].split(", ")
    assert not (tmp_path / "outputs").exists()


def test_top_level_help(tmp_path, capsys):
    proc = run_cli(["--help"], tmp_path, console_script=True)  # the installed console script
    assert proc.returncode == 0, proc.stderr
    for command in ("train", "show", "list"):
        assert f"  {command} " in proc.stdout
    assert cli.main([]) == 0 and "usage: rlpost <command>" in capsys.readouterr().out


def header_line(path: Path) -> str:
    """The first line of a yaml file's header comment, read here independently of rlpost."""
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("# @package"):
            return line.lstrip("#").strip()
    return ""


def test_list_shows_every_config_group_option_with_its_header(wide, capsys):
    assert cli.main(["list"]) == 0
    rows = {(r[0], r[1]): r[2] for r in table_rows(capsys.readouterr().out, "group")}
    conf = Path(cli.__file__).resolve().parent.parent / "conf"
    expected = {
        (str(f.parent.relative_to(conf)), f.stem): header_line(f)
        for f in conf.glob("**/*.yaml")
        if f.parent != conf and "recipe/" not in str(f.relative_to(conf))  # recipes/data/* are data files
    }
    expected.update({("recipe", f.stem): header_line(f) for f in (conf / "recipe").glob("*.yaml")})
    assert rows == expected
    assert all(rows.values()), [k for k, v in rows.items() if not v]
    for choice in [("algorithm", "dapo"), ("algorithm", "ppo"), ("model", "tiny-random"), ("hardware", "zero3")]:
        assert choice in rows
    for choice in [("data", "basic_arithmetic"), ("recipe", "default"), ("algorithm/loss", "clip")]:
        assert choice in rows
    assert ("hydra/launcher", "local") in rows and ("reward/combine", "weighted_sum") in rows
    assert rows[("algorithm", "dapo")].startswith("DAPO: clip-higher")


def test_list_filters_by_group(wide, capsys):
    assert cli.main(["list", "algorithm"]) == 0
    out = capsys.readouterr().out
    groups = {r[0] for r in table_rows(out, "group")}
    assert "algorithm" in groups and "algorithm/loss" in groups and all(g.startswith("algorithm") for g in groups)
    assert {r[1] for r in table_rows(out, "group") if r[0] == "algorithm"} >= {"grpo", "dapo", "gspo", "ppo", "rloo"}
    assert "kind" not in [line.split(" ", 1)[0] for line in out.splitlines()]  # no component section
    assert cli.main(["list", "algorithm/loss"]) == 0
    assert {r[0] for r in table_rows(capsys.readouterr().out, "group")} == {"algorithm/loss"}
    assert cli.main(["list", "reward"]) == 0  # a component kind and a config group: both
    out = capsys.readouterr().out
    assert {r[0] for r in table_rows(out, "kind")} == {"reward"}
    assert {r[0] for r in table_rows(out, "group")} == {"reward", "reward/combine"}


def test_list_piped_is_plain_text_one_line_per_row(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert not any(ch in out for ch in "│┃━─┏"), "a rich table was printed to a pipe"
    lines = out.splitlines()
    assert len(table_rows(out)) == sum(len(r.names()) for r in REGISTRIES.values())  # one line per component
    components = lines[2 : 2 + len(table_rows(out))]
    assert all(line.split()[1] in REGISTRIES[line.split()[0]].names() for line in components)
    assert max(len(line) for line in lines) > 80  # not wrapped to the terminal width
    header = lines[1]
    assert all(line[header.index("description") - 2 : header.index("description")] == "  " for line in components)


def test_list_on_a_terminal_is_a_rich_table(wide, monkeypatch, capsys):
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    assert cli.main(["list", "loss"]) == 0
    out = capsys.readouterr().out
    assert "┃" in out and "│" in out
    assert any("cispo" in line and "│" in line for line in out.splitlines())
