"""rlpost.data.sources: seeded disjoint reasoning-gym splits, file sources with templates, clear errors."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
import yaml

from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.data.mixture import is_mixture, source_nodes
from rlpost.data.sources import DataConfig, load_datasets

from support.config import from_yaml
from support.paths import REPO

CONF = REPO / "conf" / "data"


def questions(ds) -> list[str]:
    return [row["prompt"][-1]["content"] for row in ds]


def test_reasoning_gym_splits_are_seeded_and_disjoint():
    cfg = from_yaml("basic_arithmetic", train_size=64, eval_size=40)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (64, 40)
    assert not set(questions(train)) & set(questions(evals))
    again_train, again_eval = load_datasets(cfg)
    assert questions(again_train) == questions(train) and questions(again_eval) == questions(evals)
    other_train, other_eval = load_datasets(from_yaml("basic_arithmetic", train_size=64, eval_size=40, seed=1))
    assert questions(other_train) != questions(train)
    # a fresh seed is a fresh split: reasoning-gym seeds item i with seed + i, so seeds 0 and 1 once shared all
    # but one item; now only chance repeats remain (~30k distinct questions: a few at most)
    assert len(set(questions(other_eval)) & set(questions(evals))) <= 3
    assert len(set(questions(other_train)) & set(questions(train))) <= 3


def test_unanswerable_arithmetic_is_seeded_disjoint_and_its_answers_check():
    # data=unanswerable_arithmetic (TIAR, RC-GRPO): answerable rows are a op b with the right number; the
    # unanswerable ones (about unanswerable_share of them, three kinds) have the answer "None"
    cfg = from_yaml("unanswerable_arithmetic", train_size=200, eval_size=60)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (200, 60) and not set(questions(train)) & set(questions(evals))
    assert questions(load_datasets(cfg)[0]) == questions(train)
    rows = list(train) + list(evals)
    kinds = {row["kind"] for row in rows}
    assert kinds == {"answerable", "missing_operand", "undefined_quantity", "division_by_zero"}
    share = sum(row["unanswerable"] for row in rows) / len(rows)
    assert 0.3 < share < 0.5  # unanswerable_share 0.4
    for row in rows:
        assert row["unanswerable"] == (row["kind"] != "answerable")
        if row["unanswerable"]:
            assert row["answer"] == "None"
            continue
        a, op, b = re.search(r"(\d+) ([-+*]) (\d+)", row["question"]).groups()
        assert int(row["answer"]) == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}[op]
    with pytest.raises(ConfigError, match="unanswerable_share"):
        load_datasets(from_yaml("unanswerable_arithmetic", task_params={"unanswerable_share": 2.0}))


def test_noisy_line_is_seeded_disjoint_and_its_answer_is_the_lines_value():
    # data=noisy_line (DAR): 4 points of a hidden line, a query inside (interpolation) or past (extrapolation) them
    cfg = from_yaml("noisy_line", train_size=200, eval_size=60)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (200, 60) and not set(questions(train)) & set(questions(evals))
    assert questions(load_datasets(cfg)[0]) == questions(train)
    rows = list(train) + list(evals)
    for row in rows:
        xs = [int(x) for x in re.findall(r"\((-?\d+), ", row["question"])]
        query = int(re.search(r"at x = (-?\d+)\.", row["question"])[1])
        assert len(xs) == 4 and xs == sorted(set(xs)) and 0 <= xs[0] and xs[-1] <= 10
        inside = xs[0] < query < xs[-1] and query not in xs
        assert row["kind"] == ("interpolation" if inside else "extrapolation") and (inside or query > xs[-1])
        assert re.fullmatch(r"-?\d+\.\d", row["answer"])
    share = sum(row["kind"] == "extrapolation" for row in rows) / len(rows)
    assert 0.35 < share < 0.65  # extrapolate_share 0.5 (and a few rows with no free x inside)
    # without noise the points lie on the line, and the answer is that line at the query: slope and intercept
    # from the first two points, y_q = y_0 + (y_1 - y_0) / (x_1 - x_0) * (x_q - x_0)
    exact = load_datasets(from_yaml("noisy_line", task_params={"noise": 0.0}, train_size=50, eval_size=10))[0]
    for row in exact:
        (x0, y0), (x1, y1) = [
            (int(x), float(y)) for x, y in re.findall(r"\((-?\d+), (-?[\d.]+)\)", row["question"])[:2]
        ]
        query = int(re.search(r"at x = (-?\d+)\.", row["question"])[1])
        # each printed number is rounded to 0.05: y_0 and the answer 0.05 each, the slope 0.1 / (x_1 - x_0)
        bound = 0.1 + 0.1 * abs(query - x0) / (x1 - x0) + 1e-9
        assert float(row["answer"]) == pytest.approx(y0 + (y1 - y0) / (x1 - x0) * (query - x0), abs=bound)
    with pytest.raises(ConfigError, match="extrapolate_share"):
        load_datasets(from_yaml("noisy_line", task_params={"extrapolate_share": 2.0}))


def test_few_shot_ops_rows_show_their_operator_and_held_out_operators_are_unseen():
    # data=few_shot_ops (FSA-GRPO): each row's demonstrations and answer are one operator's values, the zero_shot
    # column is the same query without the demonstrations, and no held-out operator is ever trained on
    cfg = from_yaml("few_shot_ops", train_size=300, eval_size=80)
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (300, 80)
    assert questions(load_datasets(cfg)[0]) == questions(train)
    train_ops, eval_ops = set(train["operator"]), set(evals["operator"])
    assert not train_ops & eval_ops and len(eval_ops) >= 15  # 24 of the 98 operators are held out
    rules = {}
    for row in list(train) + list(evals):
        name = row["operator"]
        assert rules.setdefault(name, row["rule"]) == row["rule"]  # one operator per name, the same rule
        lines = row["question"].split("\n")
        assert lines[0] == f"{name} is a made-up operator on two numbers. Examples:" and len(lines) == 5
        demos = [re.fullmatch(rf"(\d) {name} (\d) = (-?\d+)", line).groups() for line in lines[1:4]]
        a, b = map(int, re.fullmatch(rf"What is (\d) {name} (\d)\? Give only the number\.", lines[4]).groups())
        assert len({(x, y) for x, y, _ in demos} | {(a, b)}) == 4  # 3 distinct demonstrations, none the query

        # the rule is plain arithmetic in a and b (max/min of the pair included): evaluate it on each pair
        def value(x, y, rule=row["rule"]):
            return eval(rule, {"max": max, "min": min}, {"a": x, "b": y})  # noqa: S307

        assert all(int(out) == value(int(x), int(y)) for x, y, out in demos)
        assert row["answer"] == str(value(a, b))
        assert json.loads(row["demo_answers"]) == [out for _, _, out in demos]
        assert row["zero_shot"] == f"{name} is a made-up operator on two numbers.\n{lines[4]}"
        assert row["prompt"] == [{"role": "user", "content": row["question"]}]  # template {question}
    assert len(rules) == len(train_ops | eval_ops)
    other = load_datasets(from_yaml("few_shot_ops", train_size=300, eval_size=80, seed=1))
    # the data seed draws other rows; the operator split is operator_seed's alone
    assert questions(other[0]) != questions(train) and not set(other[1]["operator"]) & train_ops
    with pytest.raises(ConfigError, match="held_out_share"):
        load_datasets(from_yaml("few_shot_ops", task_params={"held_out_share": 1.0}))


def test_eval_is_topped_up_past_train_duplicates():
    # 1-term "Calculate 7." questions: only 11 distinct ones exist, so train covers most of them.
    params = {"min_terms": 1, "max_terms": 1, "min_digits": 1, "max_digits": 1, "allow_parentheses": False}
    cfg = DataConfig(task="basic_arithmetic", task_params=params, train_size=5, eval_size=3)
    train, evals = load_datasets(cfg)
    assert len(evals) == 3 and len(set(questions(evals))) == 3
    assert not set(questions(train)) & set(questions(evals))
    with pytest.raises(ConfigError, match="distinct eval prompts"):
        load_datasets(DataConfig(task="basic_arithmetic", task_params=params, train_size=5, eval_size=20))


def test_basic_arithmetic_default_is_two_small_terms_with_plus_minus_times():
    train, evals = load_datasets(from_yaml("basic_arithmetic"))
    assert (len(train), len(evals)) == (256, 100)
    ops = set()
    for row in list(train) + list(evals):
        assert row["prompt"][0]["role"] == "user" and len(row["prompt"]) == 1
        text = row["prompt"][0]["content"]
        match = re.fullmatch(r"Calculate (\d+) ([-+*]) (\d+)\.\nGive only the final answer\.", text)
        assert match, text
        a, op, b = int(match[1]), match[2], int(match[3])
        assert 0 <= a <= 100 and 0 <= b <= 100  # reasoning-gym's range is 0..10**digits inclusive
        assert row["answer"] == str({"+": a + b, "-": a - b, "*": a * b}[op])
        assert json.loads(row["metadata"])["num_terms"] == 2
        ops.add(op)
    assert ops == {"+", "-", "*"}
    assert "question" in train.column_names


@pytest.mark.parametrize("name", ["gsm_symbolic", "chain_sum"])
def test_other_reasoning_gym_configs_load(name):
    train, evals = load_datasets(from_yaml(name, train_size=8, eval_size=4))
    assert len(train) == 8 and len(evals) == 4
    assert all(row["answer"].lstrip("-").isdigit() for row in train)


def test_unknown_task_lists_valid_names_with_did_you_mean():
    with pytest.raises(ConfigError) as err:
        load_datasets(DataConfig(task="basic_arithmetc"))
    message = str(err.value)
    assert "Did you mean 'basic_arithmetic'" in message
    assert "chain_sum" in message and "gsm_symbolic" in message and "countdown" in message


def test_bad_task_params_name_the_valid_keys():
    with pytest.raises(ConfigError, match=r"data.task_params.*max_terms"):
        load_datasets(DataConfig(task="basic_arithmetic", task_params={"max_termz": 2}))
    with pytest.raises(ConfigError, match=r"data.task_params.seed"):
        build_config(DataConfig, {"task": "chain_sum", "task_params": {"seed": 3}}, "data")


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_jsonl_with_template_and_seeded_holdout(tmp_path):
    rows = [{"problem": f"What is {i} + 1?", "solution": i + 1, "unit": "apples", "tags": ["x"]} for i in range(30)]
    path = write_jsonl(tmp_path / "train.jsonl", rows)
    cfg = from_yaml(
        "jsonl",
        path=str(path),
        eval_size=10,
        question_field="problem",
        answer_field="solution",
        template="{question} Answer in {unit}.",
        system_prompt="Be brief.",
    )
    train, evals = load_datasets(cfg)
    assert (len(train), len(evals)) == (20, 10)
    row = train[0]
    assert row["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert re.fullmatch(r"What is (\d+) \+ 1\? Answer in apples\.", row["prompt"][1]["content"])
    assert row["answer"] == str(row["solution"]) and row["unit"] == "apples"
    assert "tags" not in train.column_names  # lists are not scalar columns
    assert not set(questions(train)) & set(questions(evals))
    assert questions(load_datasets(cfg)[1]) == questions(evals)
    assert questions(load_datasets(dataclasses.replace(cfg, seed=5))[1]) != questions(evals)


def test_jsonl_plain_prompts_and_eval_file(tmp_path):
    train_path = write_jsonl(tmp_path / "a.jsonl", [{"question": f"q{i}", "answer": "1"} for i in range(5)])
    eval_path = write_jsonl(tmp_path / "b.jsonl", [{"question": "q0", "answer": "1"}, {"question": "z", "answer": "2"}])
    cfg = from_yaml(
        "jsonl", path=str(train_path), eval_split=str(eval_path), conversational=False, template="Q: {question}"
    )
    train, evals = load_datasets(cfg)
    assert train["prompt"] == [f"Q: q{i}" for i in range(5)]
    assert evals["prompt"] == ["Q: z"]  # "q0" is in train, so it is dropped from eval
    write_jsonl(eval_path, [{"question": "q0", "answer": "1"}, {"question": "q3", "answer": "1"}])
    with pytest.raises(ConfigError, match="every one of the 2 held-out rows also appears in the training rows"):
        load_datasets(cfg)  # nothing would be held out: an empty eval split is an error, not a crash in eval


def test_malformed_jsonl_rows_report_their_line(tmp_path):
    good = {"question": "1 + 1?", "answer": "2"}
    path = write_jsonl(tmp_path / "bad.jsonl", [good, "", {"question": "2 + 2?"}])
    with pytest.raises(ConfigError, match=r"bad\.jsonl line 3: missing field 'answer'"):
        load_datasets(from_yaml("jsonl", path=str(path), eval_size=1))
    write_jsonl(path, [good, good, "{not json", good])
    with pytest.raises(ConfigError, match=r"bad\.jsonl line 3: not valid JSON"):
        load_datasets(from_yaml("jsonl", path=str(path), eval_size=1))
    write_jsonl(path, [good, {"question": "  ", "answer": "1"}])
    with pytest.raises(ConfigError, match=r"bad\.jsonl line 2: empty prompt"):
        load_datasets(from_yaml("jsonl", path=str(path), eval_size=1))
    write_jsonl(path, [good])
    with pytest.raises(ConfigError, match=r"line 1: data.template uses 'level'"):
        load_datasets(from_yaml("jsonl", path=str(path), eval_size=0, template="{question} {level}"))


def test_missing_file_names_data_path(tmp_path):
    with pytest.raises(ConfigError, match=r"data\.path=.*nope\.jsonl.*no such file"):
        load_datasets(from_yaml("jsonl", path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(ConfigError, match=r"data\.path"):
        build_config(DataConfig, {"source": "parquet"}, "data")


def test_parquet_and_hf_folder_sources(tmp_path):
    import datasets

    ds = datasets.Dataset.from_list([{"question": f"q{i}", "answer": str(i)} for i in range(12)])
    ds.to_parquet(str(tmp_path / "d.parquet"))
    train, evals = load_datasets(from_yaml("parquet", path=str(tmp_path / "d.parquet"), eval_size=4, train_size=5))
    assert (len(train), len(evals)) == (5, 4)
    with pytest.raises(ConfigError, match=r"d\.parquet row 3: missing field 'answer'"):
        ds.remove_columns("answer").map(lambda r, i: {"answer": None if i == 2 else "1"}, with_indices=True).to_parquet(
            str(tmp_path / "d.parquet")
        )
        load_datasets(from_yaml("parquet", path=str(tmp_path / "d.parquet"), eval_size=4))
    datasets.DatasetDict({"train": ds, "test": ds.select(range(3))}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ConfigError, match="every one of the 3 held-out rows also appears"):
        load_datasets(from_yaml("hf", path=str(tmp_path / "dd"), eval_split="test"))  # every test prompt is in train
    datasets.DatasetDict({"train": ds.select(range(10)), "test": ds.select(range(8, 12))}).save_to_disk(
        str(tmp_path / "dd2")
    )
    train, evals = load_datasets(from_yaml("hf", path=str(tmp_path / "dd2"), eval_split="test"))
    assert (len(train), len(evals)) == (10, 2)  # q8 and q9 are in train: dropped from eval
    train, evals = load_datasets(from_yaml("hf", path=str(tmp_path / "dd"), eval_size=2))
    assert len(train) == 10 and not set(questions(train)) & set(questions(evals))


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.name)
def test_data_yaml_builds_and_every_key_is_commented(path):
    node = {**yaml.safe_load(path.read_text()), "seed": 0}  # the YAML's seed is ${seed}, the run seed
    if is_mixture(node):  # data=mixture: its sources, each composed from its own data option
        node = yaml.safe_load(path.read_text())  # no seed key of its own: each source takes the run's
        assert [s.name for s in source_nodes(node, seed=0)] == [s["name"] for s in node["sources"]]
    else:
        if node["path"] == "???":
            node["path"] = "/some/file"
        build_config(DataConfig, node, "data")
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert " # " in line, f"{path.name}: key without a comment: {line!r}"
