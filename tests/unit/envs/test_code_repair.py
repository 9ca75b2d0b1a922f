"""data/env=code_repair: attempts at a HumanEval function, the judged test report as the observation."""

from __future__ import annotations

import pytest

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.data.sources import DataConfig, load_datasets
from rlpost.envs.base import build_env
from rlpost.envs.runner import ChatRenderer, run_episodes
from rlpost.models.loading import ModelConfig, load_tokenizer


@pytest.fixture(scope="module")
def row():
    train, _ = load_datasets(DataConfig(source="human_eval", train_size=None, eval_size=8))
    return dict(train[0])


def test_a_wrong_attempt_then_a_repair(row):
    tok = load_tokenizer(ModelConfig(name="tiny-random"))
    entry = row["entry_point"]
    wrong = f"```python\ndef {entry}(*args, **kwargs):\n    return None\n```"
    turns = ["I am not sure yet.", wrong, f"```python\n{row['answer']}```"]
    header = tok.encode("<|im_start|>assistant\n", add_special_tokens=False)

    def policy(prompt_ids, rows):  # scripted attempts
        taken = [sum(ids[i : i + len(header)] == header for i in range(len(ids))) - 1 for ids in prompt_ids]
        return [tok.encode(turns[t], add_special_tokens=False) + [tok.eos_token_id] for t in taken], None

    env = build_env({"name": "code_repair", "allow_unjailed_code": True})
    (r,) = run_episodes(env, [row], [0], ChatRenderer(tok), policy, {tok.eos_token_id})
    reports = [m["content"] for m in r.messages if m["role"] == "user"]
    assert reports[0].startswith("Tests: 0 of ") and "Status: syntax_error" in reports[0]  # prose is no program
    assert reports[1].startswith("Tests: 0 of ") and "First failure: assert candidate(" in reports[1]
    assert "AssertionError" in reports[1]
    assert r.turn_rewards == [0.0, 0.0, 1.0] and r.reward == 1.0  # the last attempt passes every test
    assert (r.ended, r.episode.turns) == ("done", 3) and r.infos[-1]["passed"] == r.infos[-1]["total"] > 0


def test_code_repair_refuses_unjailed_code_unless_accepted():
    base = ["model=tiny-random", "data=human_eval", "data/env=code_repair", "reward=env"]
    with pytest.raises(ConfigError, match="data/env=code_repair runs model-written code.*allow_unjailed_code=true"):
        build_run(compose([*base, "data.env.sandbox=none"]))
    assert build_run(compose([*base, "data.env.sandbox=none", "data.env.allow_unjailed_code=true"])).env is not None
