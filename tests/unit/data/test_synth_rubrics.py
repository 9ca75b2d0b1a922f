"""rlpost synth-rubrics (ARES, seed 004 #11): parsing the writer's reply, each validity filter by hand, the
rows reward=rubric reads, and the CLI end to end through a real OpenAI-compatible endpoint, then a
1-step rubric run on what it wrote."""

from __future__ import annotations

import json

from rlpost import cli
from rlpost.data.synth_rubrics import Document, Filters, Instance, load_documents, parse, prompt, rejection, row
from rlpost.rewards.rubric import parse_rubric

from support.judges import ARES_REPLY, requests_for
from support.runs import TINY_CLI, run_cli

DOC = Document("d1", "health", "Red meat, lentils and spinach are rich in iron. Vitamin C helps absorption of iron.")


def test_parse_the_line_format():
    instance = parse(ARES_REPLY)
    assert instance is not None
    assert instance.question == "Which foods are good sources of iron for someone who feels tired all the time?"
    assert instance.answer.startswith("Red meat, lentils and spinach")
    assert instance.criteria == (
        (3, "Names at least two foods rich in iron."),
        (2, "Mentions vitamin C improving absorption."),
        (1, "Is short and friendly."),
    )
    assert parse("Question: Why?\nAnswer: Because.") is None  # no criteria
    assert parse("Answer: x\nCriteria:\n- [1] y") is None  # no question
    assert parse("Question: q?\nAnswer: a\nCriteria:\nnone listed") is None  # no weighted item


def test_each_validity_filter_by_hand():
    f = Filters()
    good = Instance(
        "Which foods give you the most iron?", "Red meat, lentils and spinach.", ((3, "Names foods"), (1, "Short"))
    )
    assert rejection(good, DOC, f) is None  # answer words meat lentils spinach: 3 of 3 in the document
    assert rejection(Instance("Which foods give iron", good.answer, good.criteria), DOC, f) == "self_containment"
    assert rejection(Instance("What foods?", good.answer, good.criteria), DOC, f) == "self_containment"  # 2 words
    pointing = Instance("Which foods does the document say give iron?", good.answer, good.criteria)
    assert rejection(pointing, DOC, f) == "self_containment"
    # content words of "Bananas and lentils cure tiredness": bananas lentils cure tiredness -> 1 of 4 = 0.25 < 0.6
    unfaithful = Instance(good.question, "Bananas and lentils cure tiredness.", good.criteria)
    assert rejection(unfaithful, DOC, f) == "faithfulness"
    assert rejection(unfaithful, DOC, Filters(min_support=0.25)) is None  # exactly at the threshold passes
    for criteria in (
        ((3, "only one"),),
        ((4, "a"), (1, "b")),
        ((1, "same"), (2, "Same")),
        ((1, good.question), (1, "b")),
        ((3, "The document lists iron foods."), (1, "Short")),  # the judge will not see a document
    ):
        assert rejection(Instance(good.question, good.answer, criteria), DOC, f) == "rubric_validity", criteria


def test_rows_carry_a_rubric_that_the_rubric_reward_reads():
    r = row(parse(ARES_REPLY), DOC, "a busy parent")
    criteria = parse_rubric(r["rubric"])
    assert [(c.name, c.weight) for c in criteria] == [("c1", 3.0), ("c2", 2.0), ("c3", 1.0)]
    assert (r["domain"], r["persona"], r["source"]) == ("health", "a busy parent", "d1")
    text = prompt(DOC, "a busy parent", 3)
    assert "Domain: health" in text and "The person asking: a busy parent" in text and "write 3 criteria" in text


def test_bundled_documents():
    docs = load_documents("recipes/data/ares_documents.jsonl")
    assert len(docs) == 10 and len({d.domain for d in docs}) == 6 and all(len(d.text) > 200 for d in docs)


def test_cli_writes_kept_and_rejected_rows_then_a_rubric_run_trains_on_them(server, tmp_path, capsys):  # noqa: F811
    out = tmp_path / "data.jsonl"
    writer = ["writer.backend=openai", f"writer.base_url={server}/ares/v1", "progress=false"]
    assert cli.main(["synth-rubrics", *writer, "per_document=2", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    assert len(requests_for("ares")) == 20  # 10 documents x 2 personas
    kept = [json.loads(line) for line in out.read_text().splitlines()]
    rejected = [json.loads(line) for line in (tmp_path / "data.rejected.jsonl").read_text().splitlines()]
    # the canned reply is faithful to the iron document only; its second persona asks the same question
    assert [(r["source"], r["persona"]) for r in kept] == [("doc00", "a curious high-school student")]
    reasons = sorted(r["reason"] for r in rejected)
    assert reasons == ["duplicate"] + ["faithfulness"] * 18
    assert "kept" in capsys.readouterr().out
    # the output is a data file for reward=rubric with per-row rubrics
    held = {**kept[0], "question": "Which foods help against iron deficiency?"}  # another prompt, the same rubric
    (tmp_path / "eval.jsonl").write_text(json.dumps(held) + "\n")
    args = [
        "train", *TINY_CLI, "data=jsonl", f"data.path={out}", f"data.eval_split={tmp_path / 'eval.jsonl'}",
        "data.eval_size=1", "eval.size=1", "reward=rubric", "reward.terms.0.params.rubric=null",
        "reward.terms.0.params.rubric_column=rubric", "reward.terms.0.params.judge.model.source=tiny_random",
        "train.num_generations=2", "train.completions_per_step=2", f"hydra.run.dir={tmp_path / 'run'}",
    ]  # fmt: skip
    run_cli(args, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("rubric/judge_calls", 0) == 6.0 for r in rows)  # 2 completions x 3 criteria


def test_cli_refuses_bad_input_before_loading(tmp_path, capsys):
    cases = [
        ([f"documents={tmp_path / 'none'}"], "no such file or folder"),
        (["personas=[]"], "personas is empty"),
        (
            ["filters.min_criteria=4", "filters.max_criteria=3"],
            "filters.min_criteria=4 is above filters.max_criteria=3",
        ),
        (["filters.min_support=2"], "filters.min_support=2"),
        (["writer.backend=openai", "writer.base_url=ftp://x"], "base_url must start with http"),
    ]
    for args, message in cases:
        assert cli.main(["synth-rubrics", *args, f"hydra.run.dir={tmp_path / 'h'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "h").exists()
