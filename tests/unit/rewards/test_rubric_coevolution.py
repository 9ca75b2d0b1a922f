"""DynamicRubric's co-evolving writer (seed 000 #24): the writer's reward by hand, a real GRPO step on a real
(tiny) writer that raises the better rubric's likelihood, its checkpoint state, and the refusals before load."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import rlpost.components  # noqa: F401
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.rewards.rubric_coevolution import (
    CoEvolveConfig,
    WriterLearner,
    mean_over_rubrics,
    signed_gap,
    writer_rewards,
)
from rlpost.rewards.rubric_writer import build_writer
from rlpost.scoring.terms import build_reward_terms

TINY = {"source": "tiny_random"}
REQUEST = "Task: What is 2 + 3?\n\nResponse 1: 5\n\nResponse 2: 7\n\nWrite 2 yes/no questions."
PREFIX = "1. Does the response"


def test_signed_gap_by_hand():
    # ref orders (0 > 1) and (0 > 2): gaps 0.9 - 0.2 = 0.7 and 0.9 - 0.5 = 0.4 -> 0.55
    assert signed_gap([0.9, 0.2, 0.5], [1.0, 0.0, 0.0]) == pytest.approx(0.55)
    assert signed_gap([0.9, None, 0.5], [1.0, 0.0, 0.0]) == pytest.approx(0.4)  # unscored candidate: no pair
    assert signed_gap([0.1, 0.2, 0.6], [1.0, 0.0, 0.0]) == pytest.approx(-0.3)  # (-0.1 - 0.5) / 2: wrong way
    assert signed_gap([0.9, 0.2], [1.0, 1.0]) is None  # the reference orders nothing


def test_writer_rewards_and_the_policy_reward_by_hand():
    scores = [[0.9, 0.2, 0.5], None, [0.1, 0.2, 0.6]]  # rubric 1 had no parseable item
    assert writer_rewards(scores, [1.0, 0.0, 0.0], -1.0) == pytest.approx([0.55, -1.0, -0.3])
    assert writer_rewards(scores, [0.0, 0.0, 0.0], -0.5) == [0.0, -0.5, 0.0]  # no order: parsed ones get 0
    # each candidate's mean over the rubrics that scored it: (0.9 + 0.1)/2, 0.2 alone, (0.5 + 0.6)/2
    assert mean_over_rubrics([[0.9, None, 0.5], None, [0.1, 0.2, 0.6]], 3) == pytest.approx([0.5, 0.2, 0.55])
    assert mean_over_rubrics([None, None], 2) == [None, None]


def learner(lr: float = 5e-2, k: int = 2, r: int = 4) -> WriterLearner:
    model = {**TINY, "lora": {"enabled": True, "r": r}}
    writer = build_writer({"model": model, "max_new_tokens": 10, "device": "cpu"})
    return WriterLearner(writer, CoEvolveConfig(rubrics_per_group=k, learning_rate=lr))


def test_a_writer_step_raises_the_better_rubrics_likelihood():
    torch.manual_seed(0)
    w = learner()
    texts = w.sample(REQUEST, PREFIX)
    assert len(texts) == 2 and all(t.startswith(PREFIX) for t in texts)
    draft = w.drafts[0]
    assert draft.tokens.shape[0] == 2 and draft.mask.shape == draft.tokens.shape
    base = {n: p.detach().clone() for n, p in w.writer.model.named_parameters() if "lora" not in n}
    with torch.no_grad():
        before = w.sequence_logps(draft)
    metrics = w.update([[1.0, 0.0]])  # rubric 0 opened the right gap, rubric 1 did not
    with torch.no_grad():
        after = w.sequence_logps(draft)
    assert metrics["writer/updates"] == 1.0 and metrics["writer/signal_frac"] == 1.0 and metrics["writer/grad_norm"] > 0
    assert (after[0] - after[1]) > (before[0] - before[1])  # A = (+0.707, -0.707): mass moves to rubric 0
    assert all(torch.equal(p, base[n]) for n, p in w.writer.model.named_parameters() if "lora" not in n)
    assert w.drafts == []


def test_equal_rewards_take_no_step():
    w = learner()
    w.sample(REQUEST, PREFIX)
    lora = {n: p.detach().clone() for n, p in w.trainable()}
    metrics = w.update([[0.3, 0.3]])
    assert metrics["writer/updates"] == 0.0 and metrics["writer/signal_frac"] == 0.0
    assert all(torch.equal(p, lora[n]) for n, p in w.trainable())
    with pytest.raises(ValueError, match="2 reward rows for 0 sampled requests"):
        w.update([[1.0, 0.0], [0.0, 1.0]])


def test_writer_state_round_trips_through_a_checkpoint_before_the_writer_loads():
    torch.manual_seed(0)
    w = learner()
    w.sample(REQUEST, PREFIX)
    w.update([[1.0, 0.0]])
    state = w.state_dict()
    assert state["updates"] == 1 and state["weights"] and "state" in state["optimizer"]
    fresh = learner()
    fresh.load_state_dict(state)  # lazily loaded writer: applied on first use
    assert fresh.updates == 1 and fresh.state_dict()["weights"].keys() == state["weights"].keys()
    fresh.sample(REQUEST, PREFIX)  # loads, wraps with LoRA and applies the saved state
    for name, value in fresh.trainable():
        torch.testing.assert_close(value.detach(), state["weights"][name])
    assert (
        fresh.optimizer is not None
        and fresh.optimizer.state_dict()["state"].keys() == state["optimizer"]["state"].keys()
    )


def test_dynamic_rubric_saves_its_writer_as_component_state():
    node = [
        {
            "name": "dynamic_rubric",
            "params": {
                "writer": {"model": {**TINY, "lora": {"enabled": True, "r": 4}}, "max_new_tokens": 10},
                "judge": {"model": TINY},
                "co_evolve": {
                    "reference": {"name": "callable", "params": {"path": "support.rewards:text_hash_reward"}}
                },
            },
        }
    ]
    (reward,), _, _ = build_reward_terms(node)
    assert type(reward).stateful and reward.state_dict() == {"updates": 0}
    reward.group_size, reward.learning = 2, True
    logged = {}
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    out = reward([prompt] * 4, ["5", "six", "2+3=5", "4"], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert len(out) == 4 and logged["dynamic_rubric/writer_failed"] == 0.0  # the prefix makes each rubric parse
    assert "dynamic_rubric/writer/gap" in logged and logged["dynamic_rubric/writer/updates"] == reward.learner.updates
    assert reward.state_dict()["updates"] == reward.learner.updates


def test_a_fallback_group_gives_the_writer_the_unparsed_reward():
    """No prefix: the tiny writer's text parses to no item, fallback_items score the group, and the writer's
    K rubrics all get unparsed_reward (equal: no step), so the update sees one reward row per sampled group."""
    torch.manual_seed(0)
    node = [
        {
            "name": "dynamic_rubric",
            "params": {
                "writer": {"model": {**TINY, "lora": {"enabled": True, "r": 4}}, "max_new_tokens": 6},
                "writer_prefix": "",
                "fallback_items": ["The response says 5"],
                "judge": {"model": TINY},
                "co_evolve": {
                    "reference": {"name": "callable", "params": {"path": "support.rewards:text_hash_reward"}}
                },
            },
        }
    ]
    (reward,), _, _ = build_reward_terms(node)
    reward.group_size, reward.learning = 2, True
    logged = {}
    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    out = reward([prompt] * 2, ["5", "six"], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert logged["dynamic_rubric/writer_fallback"] == 1.0 and all(r is not None for r in out)
    assert reward.pending == [[-1.0, -1.0]] and logged["dynamic_rubric/writer/updates"] == 0.0
    assert reward.learner is not None and reward.learner.drafts == []


def test_refused_before_any_model_loads():
    writer = "reward.terms.0.params.writer"
    with pytest.raises(
        ConfigError, match=r"co_evolve.enabled=true trains the rubric writer, which needs .*backend=local"
    ):
        build_run(compose(["reward=dynamic_rubric", f"{writer}.backend=openai", f"{writer}.model.source=smollm2"]))
    run = build_run(compose(["reward=dynamic_rubric", f"{writer}.model.source=smollm2"]))
    with pytest.raises(ConfigError, match="copies would diverge with hardware.num_processes=2"):
        run.reward.funcs[0].check_run(SimpleNamespace(hardware=SimpleNamespace(num_processes=2)))
    with pytest.raises(ConfigError, match="co_evolve.reference is null"):
        build_run(
            compose(
                [
                    "reward=dynamic_rubric",
                    f"{writer}.model.source=smollm2",
                    "reward.terms.0.params.co_evolve.reference=null",
                ]
            )
        )


def test_a_run_trains_the_writer_and_checkpoints_it(tmp_path):
    """`rlpost train reward=dynamic_rubric` on the tiny model with a tiny co-evolving writer: each checkpoint
    carries the writer's adapters, optimizer and update count, loadable the way resume loads them."""
    from rlpost.runs.state import STATE_FILE

    from support.runs import TINY_CLI, run_cli

    p = "reward.terms.0.params"
    run_dir = tmp_path / "run"
    overrides = [o for o in TINY_CLI if not o.startswith("train.steps")]
    overrides += ["reward=dynamic_rubric", "train.steps=2", "train.save_steps=1", f"hydra.run.dir={run_dir}"]
    overrides += [f"{p}.writer.model.source=tiny_random", f"{p}.judge.model.source=tiny_random"]
    overrides += [f"{p}.writer.max_new_tokens=8", f"{p}.co_evolve.reference.name=callable"]
    overrides += [f"+{p}.co_evolve.reference.params.path=support.rewards:text_hash_reward"]
    run_cli(["train", *overrides], tmp_path)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r]
    assert [r["dynamic_rubric/writer_failed"] for r in steps] == [0.0, 0.0]
    updates = steps[-1]["dynamic_rubric/writer/updates"]
    state = torch.load(run_dir / "checkpoints" / "checkpoint-2" / STATE_FILE, weights_only=True)
    writer = state["reward.terms.dynamic_rubric"]
    assert writer["updates"] == updates and writer["weights"] and "state" in writer["optimizer"]
    restored = learner(r=16)  # the yaml's adapter rank
    restored.load_state_dict(writer)
    restored.sample(REQUEST, PREFIX)  # loads the writer and applies the saved adapters and optimizer
    assert restored.updates == updates
    for name, value in restored.trainable():
        torch.testing.assert_close(value.detach(), writer["weights"][name])
