"""data/transform=languages (rlpost/transforms/languages.py, LRPO seed 004 #9): each held-out question once per
language, in LRPO's own wording; per-language accuracy through a 1-step tiny-model run; config errors."""

from __future__ import annotations

import json

import pytest

import rlpost.components  # noqa: F401  (registers)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.rollouts.base import user_text, with_user_text
from rlpost.rollouts.language_routed import LanguageRouted
from rlpost.transforms.base import build_transform

from support.runs import TINY_CLI, run_cli

ROWS = [
    {"prompt": [{"role": "user", "content": "1 + 1 = ?"}], "answer": "2"},
    {"prompt": [{"role": "user", "content": "2 + 5 = ?"}], "answer": "7"},
]


def test_each_question_once_per_language_in_lrpos_wording():
    languages = build_transform({"name": "languages", "languages": ["English", "French"]})
    out = languages(ROWS, "eval")
    # question-major: (q1, English), (q1, French), (q2, English), (q2, French); the answer stays the row's
    assert [(r["answer"], r["language"]) for r in out] == [("2", "English"), ("2", "French"), ("7", "English"),
                                                           ("7", "French")]  # fmt: skip
    assert out[1]["prompt"] == [{"role": "user", "content": "1 + 1 = ?\n\nAnswer in French."}]
    # the prompt LRPO's rollout trains a French row under (rlpost/rollouts/language_routed.py generate)
    rollout = LanguageRouted.Config()
    note = rollout.instruction.format(language="French")
    assert out[1]["prompt"] == with_user_text(ROWS[0]["prompt"], f"{user_text(ROWS[0]['prompt'])}\n\n{note}")
    assert ROWS[0]["prompt"][0]["content"] == "1 + 1 = ?"  # the input rows are not changed in place
    assert languages(ROWS, "train") == ROWS  # apply_to: eval leaves training to the router
    assert len(build_transform({"name": "languages", "apply_to": "both"})(ROWS, "train")) == 10


def test_defaults_are_the_routers_arms_and_instruction():
    transform, rollout = build_transform({"name": "languages"}).cfg, LanguageRouted.Config()
    assert transform.languages == rollout.languages and transform.instruction == rollout.instruction


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"languages": []}, "languages must be a non-empty list of distinct names"),
        ({"languages": ["French", "French"]}, "languages must be a non-empty list of distinct names"),
        ({"instruction": "Answer in French."}, "instruction must contain {language}"),
        ({"column": "prompt"}, "column='prompt' must name a new row column"),
        ({"apply_to": "train"}, "apply_to"),
    ],
)
def test_bad_settings_are_refused(params, match):
    with pytest.raises(ConfigError, match=match):
        build_run(compose(["model=tiny-random", "data/transform=languages",
                           *(f"data.transform.{k}={v}" for k, v in params.items())]))  # fmt: skip


def test_per_language_accuracy_on_the_tiny_model(tmp_path):
    run_dir = tmp_path / "run"
    args = ["train", *TINY_CLI, "train.steps=1", "data/transform=languages", "eval.group_by=language", "eval.size=10"]
    run_cli([*args, f"hydra.run.dir={run_dir}"], tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    final = next(r for r in reversed(rows) if "eval/accuracy" in r)
    per_language = [final[f"eval/accuracy/{name}"] for name in ("English", "French", "Spanish", "German", "Chinese")]
    assert final["eval/num_prompts"] == 10  # 2 questions x 5 languages
    assert final["eval/accuracy"] == pytest.approx(sum(per_language) / 5)  # equal rows per language
