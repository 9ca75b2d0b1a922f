"""Malformed data rows are reported with file and line; ``data.on_bad_row=skip`` drops, counts and logs them."""

from __future__ import annotations

import json
import logging

import pytest

from rlpost.core.errors import ConfigError
from rlpost.data.sources import SKIPPED, load_datasets

from support.config import from_yaml

GOOD = {"question": "1 + 1?", "answer": "2"}
BAD_ROWS = [  # (row as written to the jsonl line, message for that line)
    ({"question": "2 + 2?"}, "missing field 'answer'"),
    ({"question": ["2", "+", "2"], "answer": "4"}, "field 'question' must be text or a number, got list"),
    ({"question": "3 + 3?", "answer": {"value": 6}}, "field 'answer' must be text or a number, got dict"),
    ({"question": "   ", "answer": "0"}, "empty prompt"),
    ({"question": "x" * 101, "answer": "0"}, "prompt of 101 characters is longer than data.max_prompt_chars=100"),
    ("{not json", "not valid JSON"),
    ([1, 2], "expected a JSON object, got list"),
]


def write(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


@pytest.mark.parametrize(
    ("row", "message"), BAD_ROWS, ids=[m.split(" ")[0] + str(i) for i, (_, m) in enumerate(BAD_ROWS)]
)
def test_bad_row_fails_with_file_and_line(tmp_path, row, message):
    path = write(tmp_path / "d.jsonl", [GOOD, GOOD, row, GOOD])
    cfg = from_yaml("jsonl", path=path, eval_size=1, max_prompt_chars=100)
    with pytest.raises(ConfigError, match=r"d\.jsonl line 3: ") as err:
        load_datasets(cfg)
    assert message in str(err.value) and "data.on_bad_row=skip" in str(err.value)


def test_skip_drops_counts_and_logs_every_bad_row(tmp_path, caplog):
    rows = [{"question": f"{i} + 1?", "answer": str(i + 1)} for i in range(6)] + [r for r, _ in BAD_ROWS]
    path = write(tmp_path / "d.jsonl", rows)
    cfg = from_yaml("jsonl", path=path, eval_size=2, max_prompt_chars=100, on_bad_row="skip")
    with caplog.at_level(logging.WARNING, logger="rlpost.data.sources"):
        train, evals = load_datasets(cfg)
    assert len(train) + len(evals) == 6
    assert SKIPPED[path] == len(BAD_ROWS)
    assert f"data: skipped {len(BAD_ROWS)} of {len(rows)} rows of {path}" in caplog.text
    assert "line 7: missing field 'answer'" in caplog.text  # the first one, with its line


def test_all_rows_bad_is_an_error_even_when_skipping(tmp_path):
    path = write(tmp_path / "d.jsonl", [{"q": 1}, {"q": 2}])
    with pytest.raises(ConfigError, match=r"all 2 rows are malformed \(first: .*line 1: missing field 'question'"):
        load_datasets(from_yaml("jsonl", path=path, eval_size=0, on_bad_row="skip"))


def test_parquet_rows_are_skipped_by_row_number(tmp_path):
    import datasets

    rows = [{"question": f"q{i}", "answer": None if i == 3 else str(i)} for i in range(8)]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    cfg = from_yaml("parquet", path=str(tmp_path / "d.parquet"), eval_size=2)
    with pytest.raises(ConfigError, match=r"d\.parquet row 4: missing field 'answer'"):
        load_datasets(cfg)
    train, evals = load_datasets(from_yaml("parquet", path=str(tmp_path / "d.parquet"), eval_size=2, on_bad_row="skip"))
    assert len(train) + len(evals) == 7


def test_invalid_on_bad_row_lists_the_choices(tmp_path):
    with pytest.raises(ConfigError, match=r"data.on_bad_row='ignore'. Valid choices: fail, skip"):
        from_yaml("jsonl", path="x.jsonl", on_bad_row="ignore")


def test_a_reward_column_the_data_lacks_is_an_error_before_any_model_loads():
    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.train import _check_columns

    run = build_run(compose(["model=tiny-random", "data.train_size=8", "data.eval_size=4", "eval.size=4"]))
    train, evals = load_datasets(run.data)
    _check_columns(run, train, evals)  # math_answer reads `answer`: present
    typo = build_run(compose(["model=tiny-random", "data.train_size=8", "data.eval_size=4", "eval.size=4",
                              "reward.terms.0.params.column=answr"]))  # fmt: skip
    with pytest.raises(ConfigError, match=r"reward term math_answer: params.column='answr' names no column of the "
                       r"training and held-out data; its columns are: .*answer"):  # fmt: skip
        _check_columns(typo, train, evals)


@pytest.mark.parametrize(
    "overrides, key",
    [
        (
            ["algorithm/advantage=pmi_tokens", "algorithm.advantage.answer_column=answr"],
            "algorithm.advantage.answer_column",
        ),
        (
            ["algorithm/rollout=hindsight_critique", "algorithm.rollout.gold_column=answr"],
            "algorithm.rollout.gold_column",
        ),
    ],
)
def test_a_component_column_the_training_data_lacks_is_an_error_before_any_model_loads(overrides, key):
    # Component.training_columns: P-GRPO's answer for its hinted forward, HindSearch's gold answer for the critique
    from rlpost.app import compose
    from rlpost.build import build_run
    from rlpost.train import _check_columns

    base = ["model=tiny-random", "data.train_size=8", "data.eval_size=4", "eval.size=4"]
    run = build_run(compose([*base, *overrides[:1]]))
    train, evals = load_datasets(run.data)
    _check_columns(run, train, evals)  # both read `answer`: present
    typo = build_run(compose([*base, *overrides]))
    with pytest.raises(
        ConfigError, match=rf"{key}='answr' is not a column of the training data; its columns are: .*answer"
    ):
        _check_columns(typo, train, evals)
