"""Fuzz every declared config field (issue 16): bad numbers and bad paths fail cleanly, before any load.

Every numeric and path field of every top-level group and of every registered component is found by
``rlpost/dev/config_fields.py`` (dataclasses + registries, no hand list) and set, one at a time, to 0,
-1, a huge value, a wrong type ('abc', a list) and, for paths, an empty folder, a regular file, a
file of binary garbage and a missing file. Each case must either validate, and then the value is
inside the field's declared ``Range``, or raise ``ConfigError`` with one line that names the key.
Any other exception fails the test with its traceback.

The bulk runs in-process through ``build_run``, what ``rlpost train`` runs on every composed job
before Hydra launches (``app.validate`` -> ``build_run``): each field's node is chosen with
Hydra overrides and composed once, then the fuzzed value is set on the composed config (the types
Hydra gives: int, float, str, list). The issue's 11 reports run through ``rlpost.cli.main`` with a
tripwire launcher, five of them as real ``rlpost train`` processes (exit code 2, one stderr line,
no traceback, no run directory).
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from typing import Any

import pytest

from rlpost import app, cli
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.core.schema import to_container
from rlpost.dev.config_fields import DeclaredField, declared_fields, ranges_section, unvisited, updated_doc

from support.config import assert_clean_failure
from support.paths import REPO

FIELDS = [f for f in declared_fields() if f.scalar is not None or f.path is not None]
PATH_VALUES = ("<empty folder>", "<text file>", "<garbage file>", "abc", 0, ["x"])

# What a field's node needs composed around it so that the run validates with its default values:
# Hydra overrides per selector, a settings key prefix or a component choice ({name}: `stand_ins`).
CONTEXT: dict[str, list[str]] = {
    "model.path": ["model=hf", "model.path={model}"],
    "model.lora": ["model.lora.enabled=true"],
    "algorithm.critic": ["algorithm=ppo"],
    "algorithm.ensemble": ["algorithm=ug_ttt"],
    "algorithm/select=sdga": ["data/env=search", "reward=env"],  # depth = an episode's tool calls
    "algorithm.overlong": ["algorithm=dapo"],  # soft_penalty on: cache_len meets max_completion_length
    "algorithm/advantage=gae": ["algorithm=ppo"],  # GAE reads PPO's critic
    "algorithm/advantage=dpo": ["algorithm=ed_idpo"],  # DPO's weights need its loss and aggregation
    "algorithm/advantage=tiar": ["reward=ternary_abstention"],
    "algorithm/advantage=routed": ["reward=math_answer_format"],
    "algorithm/advantage=segments": ["reward=math_answer_format"],
    "reward/combine=decoupled": ["reward=math_answer_format"],
    "algorithm/loss=opd": ["algorithm.loss.teacher_model=smollm2-135m"],  # the default teacher needs `make qwen`
    "reward.terms[i].name=reward_model": ["reward.terms.0.params.path={rm}"],
    "reward.terms[i].name=dynamic_rubric": ["reward.terms.0.params.writer.model.source=smollm2"],  # Qwen: make qwen
    "reward.terms[i].name=pared": [
        "reward.terms.0.params.demo_column=null",
        "reward.terms.0.params.demos_path={demos}",
    ],
    "algorithm/grad=trusted_projection": [
        "algorithm.grad.trusted_projection.source=file",
        "algorithm.grad.trusted_projection.path={subspace}",
    ],
    "algorithm/grad=direction_monitor": [
        "algorithm.grad.direction_monitor.source=file",
        "algorithm.grad.direction_monitor.path={subspace}",
    ],
    "judge.backend=": ["reward=rubric"],  # a judge node: the rubric reward's
    "data/env=calculator": ["reward=env"],
    "data/env=formula": ["reward=env", "data=formula_tasks"],
    "algorithm/rollout=frost": ["reward=infill_likelihood", "data=infill"],
    "algorithm/rollout=self_critique": ["train.num_generations=6", "train.completions_per_step=12"],  # 2k + 1 rows
    "data/env=search": ["reward=env"],
    "data/env=frozen_worker": ["reward=env"],
    "data/env=skill_executor": ["reward=env", "data=skill_families"],
    "data/env=code_repair": ["reward=env", "data=human_eval", "data.env.allow_unjailed_code=true"],
    "data/env=simulated_user": ["reward=env", "data=booking"],
    "data/env=safety_controller": [
        "reward=env",
        "data=jsonl",
        "data.path=recipes/data/safety_prompts.jsonl",
    ],  # rows naming their rubric
    "data/env=diagnose_revise": ["reward=env"],
    "data/env=python": [
        "reward=env",
        "data.env.allow_unjailed_code=true",
    ],  # an environment's reward reaches the run through reward=env
    "data/env=callable": ["reward=env", "data.env.path=support.envs:CountDown"],
    "data/env=gym": ["reward=env", "data.env.path=support.envs:GuessNumber"],
    "algorithm/advantage=turn_grpo": ["data/env=calculator", "reward=env"],  # per-turn advantages need episodes
}
DATA_SOURCES = {"jsonl": "{rows_jsonl}", "parquet": "{rows_parquet}", "hf": "{dataset}"}


@pytest.fixture(scope="module")
def stand_ins(tmp_path_factory) -> dict[str, str]:
    """Files and folders the bases point at, and the path values the fuzz sets."""
    import pandas as pd
    import torch

    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "model").mkdir()  # names only: nothing is loaded before training
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp / "model" / name).write_text("{}")
    (tmp / "rows.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    pd.DataFrame({"question": ["1 + 1"], "answer": ["2"]}).to_parquet(tmp / "rows.parquet")
    (tmp / "dataset").mkdir()
    (tmp / "dataset" / "train.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    (tmp / "rm").mkdir()
    (tmp / "rm" / "config.json").write_text(
        '{"architectures": ["LlamaForSequenceClassification"], "id2label": {"0": "x"}}'
    )
    (tmp / "demos.jsonl").write_text('{"prompt": "Calculate 2 + 2.", "response": "4"}\n')
    torch.save({}, tmp / "subspace.pt")
    (tmp / "empty").mkdir()
    (tmp / "text.txt").write_text("just some text\n")
    (tmp / "garbage.bin").write_bytes(bytes(range(128, 256)) * 8)
    return {
        "model": str(tmp / "model"),
        "rows_jsonl": str(tmp / "rows.jsonl"),
        "rows_parquet": str(tmp / "rows.parquet"),
        "dataset": str(tmp / "dataset"),
        "rm": str(tmp / "rm"),
        "demos": str(tmp / "demos.jsonl"),
        "subspace": str(tmp / "subspace.pt"),
        "<empty folder>": str(tmp / "empty"),
        "<text file>": str(tmp / "text.txt"),
        "<garbage file>": str(tmp / "garbage.bin"),
    }


@pytest.fixture(scope="module")
def composed(stand_ins):
    """Composed configs (plain dicts), one per distinct override list, composed once."""
    cache: dict[tuple[str, ...], dict] = {}

    def get(overrides: list[str]) -> dict:
        job = tuple(o.format(**stand_ins) for o in overrides)
        if job not in cache:
            cache[job] = to_container(app.compose(list(job)))
        return copy.deepcopy(cache[job])

    return get


def bases(field: DeclaredField) -> list[list[str]]:
    """The override lists under which the field's node is part of the run: its choice and its
    CONTEXT (data paths: one per data source)."""
    if field.key in ("data.path", "data.eval_split"):
        return [[f"data={source}", f"data.path={path}"] for source, path in DATA_SOURCES.items()]
    if field.choice:
        context = [o for sel, c in CONTEXT.items() if field.choice.startswith(sel) for o in c]
    else:
        context = [o for sel, c in CONTEXT.items() if field.key == sel or field.key.startswith(sel + ".") for o in c]
    return [[*_choose(field), *context]]


def _choose(field: DeclaredField) -> list[str]:
    """The override choosing the field's component (none for settings and judges)."""
    if field.group == "reward.terms[i].name":
        return [f"reward={field.component}"]
    if field.group in ("algorithm/regularizers", "algorithm/grad"):  # list groups
        return [f"{field.group}=[{field.component}]"]
    return [field.choice] if "/" in field.group else []


def key_of(field: DeclaredField) -> str:
    """The field's key in a composed config: the first reward term, the judge of a rubric reward."""
    return field.key.replace("[i]", "[0]")


def presets(field: DeclaredField) -> dict[str, Any]:
    """Values set on the composed config before the fuzzed one (a judge backend's node)."""
    if field.group == "judge.backend":
        return {"reward.terms[0].params.judge": {"backend": field.component}}
    return {}


def set_key(cfg: dict, key: str, value: Any) -> None:
    """``cfg[a][b][0][c] = value`` for ``key = "a.b[0].c"`` (missing mappings are created)."""
    parts = [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[\]]+", key)]
    node = cfg
    for part in parts[:-1]:
        if isinstance(part, str) and node.get(part) is None:
            node[part] = {}
        node = node[part]
    node[parts[-1]] = value


def fuzz_values(field: DeclaredField) -> list[Any]:
    """0, -1, huge, 'abc', a list (numbers); folders, files, garbage and wrong types (paths)."""
    if field.path is not None:
        return list(PATH_VALUES)
    huge = 10**12 if field.scalar is int else 1e12
    if field.type_name().startswith("list"):
        return [[0], [-1], [huge], "abc", ["abc"]]
    return [0, -1, huge, "abc", [1]]


def names_key(message: str, key: str) -> bool:
    """The message names the key: in full (``train.steps=0 ...``), or as its node and field
    (``algorithm.advantage: gamma=1.5 must be in [0, 1]``, a component's own check)."""
    if key in message:
        return True
    parent, _, name = key.rpartition(".")
    return bool(parent) and parent in message and re.search(rf"\b{re.escape(name)}\b", message) is not None


def in_declared_range(field: DeclaredField, value: Any) -> bool:
    """A value that validated is of the field's type and inside its declared range."""
    items = value if isinstance(value, list) and field.type_name().startswith("list") else [value]
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return False
        if field.scalar is int and not isinstance(item, int):
            return False
        if not field.range.contains(item):
            return False
    return True


def run_case(field: DeclaredField, base: list[str], value: Any, composed, stand_ins) -> str | None:
    """Build the run with the field set to ``value``; None when the outcome is clean, else why not."""
    shown = stand_ins.get(value, value) if isinstance(value, str) else value
    cfg = composed(base)
    for key, preset in presets(field).items():
        set_key(cfg, key, preset)
    set_key(cfg, key_of(field), shown)
    try:
        build_run(cfg)
    except ConfigError as err:
        message = str(err)
        if "\n" in message.strip():
            return f"{value!r}: more than one line: {message!r}"
        if not names_key(message, key_of(field)):
            return f"{value!r}: the message does not name {key_of(field)}: {message!r}"
        return None
    if field.path is None and not in_declared_range(field, value):
        return f"{value!r} validated but is outside the declared range ({field.valid()})"
    if field.path is not None and not isinstance(value, str):
        return f"{value!r} validated but is not a path"
    return None


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f"{f.key}@{f.component}" if f.choice else f.key)
def test_every_value_validates_in_range_or_fails_naming_the_key(field, composed, stand_ins):
    problems = []
    for base in bases(field):
        build_run(composed(base))  # the base itself validates
        problems += [p for v in fuzz_values(field) if (p := run_case(field, base, v, composed, stand_ins))]
    assert not problems, f"{key_of(field)} ({field.choice or 'settings'}):\n" + "\n".join(problems)


def test_every_numeric_field_declares_a_range():
    assert not unvisited(), "numeric fields without Range(...): " + ", ".join(unvisited())


def test_the_fuzz_covers_every_group_and_registry():
    keys = {f.key.split(".")[0] for f in FIELDS}
    assert {"train", "eval", "logging", "seed", "model", "data", "hardware", "algorithm", "reward"} <= keys
    assert len([f for f in FIELDS if f.path is not None]) >= 6
    assert len(FIELDS) >= 200


def test_errors_doc_lists_the_declared_ranges():
    """docs/errors.md's generated section is up to date: run `python -m rlpost.dev.config_fields`."""
    text = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    assert ranges_section() in text and updated_doc(text) == text, "stale: run python -m rlpost.dev.config_fields"


# ---- the reports, through the CLI ---------------------------------------------------------
@pytest.fixture
def bad_inputs(no_launch):  # noqa: F811
    tmp = no_launch
    (tmp / "garbage.jsonl").write_bytes(b'{"question": "\xff\xfe\x00 1 + 1", "answer": "2"}\n' + bytes(range(256)))
    (tmp / "config_only").mkdir()
    (tmp / "config_only" / "config.json").write_text("{}")
    (tmp / "empty_model").mkdir()
    return tmp


REPORTS = [  # (id, argv with {tmp}, substrings of the message)
    ("non-utf8-data", ["data=jsonl", "data.path={tmp}/garbage.jsonl"], ["data.path=", "is not UTF-8 text"]),
    ("config-only-model", ["model=hf", "model.path={tmp}/config_only"], ["model.path=", "holds no weights"]),
    ("empty-model-folder", ["model=hf", "model.path={tmp}/empty_model"], ["model.path=", "is an empty folder"]),
    ("negative-lr", ["train.learning_rate=-1"], ["train.learning_rate=-1 must be > 0."]),
    ("zero-completion-length", ["train.max_completion_length=0"], ["train.max_completion_length=0 must be >= 1."]),
    ("negative-temperature", ["train.temperature=-0.5"], ["train.temperature=-0.5 must be > 0."]),
    ("zero-processes", ["hardware.num_processes=0"], ["hardware.num_processes=0 must be >= 1."]),
    ("negative-eval-size", ["eval.size=-1"], ["eval.size=-1 must be >= 1."]),
    ("negative-save-steps", ["train.save_steps=-2"], ["train.save_steps=-2 must be >= 0"]),
    ("epsilon-low-above-one", ["algorithm.loss.epsilon_low=2"], ["algorithm.loss.epsilon_low=2 must be in [0, 1)."]),
    ("no-tokenizer", ["model=hf", "model.path={tmp}/no_tokenizer"], ["model.path=", "holds no tokenizer"]),
]


@pytest.mark.parametrize(("argv", "expected"), [r[1:] for r in REPORTS], ids=[r[0] for r in REPORTS])
def test_reported_bad_input_fails_cleanly(bad_inputs, capsys, argv, expected):
    (bad_inputs / "no_tokenizer").mkdir()
    for name in ("config.json", "model.safetensors"):
        (bad_inputs / "no_tokenizer" / name).write_text("{}")
    fill = lambda s: s.replace("{tmp}", str(bad_inputs))  # noqa: E731
    code = cli.main(["train", *(fill(a) for a in argv), f"hydra.run.dir={bad_inputs}/run"])
    assert_clean_failure(code, capsys.readouterr().err, [fill(e) for e in expected], bad_inputs)
    assert not (bad_inputs / "run").exists()


SUBPROCESS_REPORTS = ["non-utf8-data", "empty-model-folder", "negative-lr", "zero-processes", "epsilon-low-above-one"]


@pytest.mark.parametrize("case", SUBPROCESS_REPORTS)
def test_reported_bad_input_exits_2_from_a_real_process(tmp_path, case):
    argv, expected = {r[0]: r[1:] for r in REPORTS}[case]
    (tmp_path / "garbage.jsonl").write_bytes(bytes(range(256)))
    (tmp_path / "empty_model").mkdir()
    fill = lambda s: s.replace("{tmp}", str(tmp_path))  # noqa: E731
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlpost.cli", "train", *(fill(a) for a in argv), f"hydra.run.dir={tmp_path}/run"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.stdout == ""
    assert_clean_failure(proc.returncode, proc.stderr, [fill(e) for e in expected], tmp_path)
    assert not (tmp_path / "run").exists()
