"""data.transform=ect (rlpost/transforms/ect.py, seed 000 #3): the prompt rewriting by hand, per-row
monitors, the eval (deployment) condition, config errors, and a 2-step tiny-model run through the CLI."""

from __future__ import annotations

import json

import pytest

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import DataConfig, load_datasets
from rlpost.transforms.base import add_note, build_transform

from support.runs import TINY_CLI, run_cli

LOW = "Your response will be evaluated by an automatic checker that reads only the final number; this feedback has low fidelity."
HIGH = "Your response will be evaluated by an expert grader who verifies the whole answer; this feedback has high fidelity."
USER = [{"role": "user", "content": "1 + 1 = ?"}]


def ect(**params):
    return build_transform({"name": "ect", **params})


def test_add_note_positions_by_hand():
    assert add_note(USER, "N", "system") == [{"role": "system", "content": "N"}, *USER]
    with_system = [{"role": "system", "content": "Be brief."}, *USER]
    assert add_note(with_system, "N", "system")[0] == {"role": "system", "content": "Be brief.\n\nN"}
    assert add_note(USER, "N", "prefix") == [{"role": "user", "content": "N\n\n1 + 1 = ?"}]
    assert add_note(USER, "N", "suffix") == [{"role": "user", "content": "1 + 1 = ?\n\nN"}]
    assert add_note("1 + 1 = ?", "N", "system") == "N\n\n1 + 1 = ?"
    assert add_note("1 + 1 = ?", "N", "suffix") == "1 + 1 = ?\n\nN"
    assert USER == [{"role": "user", "content": "1 + 1 = ?"}]  # the input is not modified


def test_train_rows_name_their_monitor_and_eval_rows_the_high_fidelity_one():
    rows = [{"prompt": USER, "answer": "2", "src": "expert"}, {"prompt": USER, "answer": "2", "src": None}]
    transform = ect(monitor_column="src")
    train = transform(rows, "train")
    assert train[0]["prompt"] == [{"role": "system", "content": HIGH}, *USER]  # the row's own monitor
    assert train[1]["prompt"] == [{"role": "system", "content": LOW}, *USER]  # no value: train_monitor
    assert [(r["monitor"], r["fidelity"]) for r in train] == [("expert", "high"), ("checker", "low")]
    evals = transform(rows, "eval")
    assert [r["prompt"][0]["content"] for r in evals] == [HIGH, HIGH]  # deployment: the high-fidelity monitor
    kept = ect(monitor_column="src", eval_monitor=None)(rows, "eval")
    assert [r["monitor"] for r in kept] == ["expert", "checker"]  # eval_monitor null: the train rule
    custom = ect(template="[{name}|{fidelity}]", position="suffix")([rows[1]], "train")
    assert custom[0]["prompt"] == [{"role": "user", "content": "1 + 1 = ?\n\n[checker|low]"}]
    with pytest.raises(ConfigError, match="src='judge' is not a monitor"):
        ect(monitor_column="src")([{"prompt": USER, "answer": "2", "src": "judge"}], "train")


def test_load_datasets_applies_it_per_split(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"question": f"{i} + 1", "answer": str(i + 1)}) + "\n" for i in range(6)))
    cfg = DataConfig(source="jsonl", path=str(path), eval_size=2, template="{question}", transform={"name": "ect"})
    train, evals = load_datasets(cfg, build_transform(cfg.transform))  # the builder builds it (rlpost/build.py)
    assert len(train) == 4 and len(evals) == 2
    assert {r["prompt"][0]["content"] for r in train} == {LOW} and set(train["fidelity"]) == {"low"}
    assert {r["prompt"][0]["content"] for r in evals} == {HIGH} and set(evals["monitor"]) == {"expert"}
    plain, _ = load_datasets(DataConfig(source="jsonl", path=str(path), eval_size=2, template="{question}"))
    assert plain[0]["prompt"] == [{"role": "user", "content": plain[0]["question"]}]  # default: no transform


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["data.transform.name=ectt"], r"data.transform.name: Unknown data transform 'ectt'. Did you mean 'ect'"),
        (["data.transform.train_monitor=judge"], r"train_monitor='judge' is not a monitor. Valid choices: checker"),
        (["data.transform.eval_monitor=judge"], r"eval_monitor='judge' is not a monitor"),
        (["data.transform.template='by {who}'"], r"template uses 'who'"),
        (["data.transform.position=middle"], r"position='middle'. Valid choices: system, prefix, suffix"),
        (["data.transform.monitors.checker.fidelity=null"], r"monitors.checker"),
    ],
)
def test_bad_transform_config_fails_before_any_model_loads(overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_run(compose(["model=tiny-random", "data/transform=ect", *overrides]))


def test_ect_runs_two_steps_on_the_tiny_model(tmp_path):
    run_dir = tmp_path / "ect"
    args = ["train", "data/transform=ect", *TINY_CLI, "train.steps=2", "eval.group_by=fidelity"]
    run_cli([*args, "logging.samples_per_step=2", f"hydra.run.dir={run_dir}"], tmp_path)
    metrics = {
        k: v for line in (run_dir / "metrics.jsonl").read_text().splitlines() for k, v in json.loads(line).items()
    }
    assert metrics["step"] == 2 and "eval/accuracy/high" in metrics  # eval prompts all name the expert
    samples = (run_dir / "samples.jsonl").read_text()
    assert "automatic checker that reads only the final number" in samples  # training prompts name the checker
