"""rlpost diagnose (seed 004 #13): the verdict on hand-made metrics for every branch, then the command
on the tiny random model with a reward of known counts and with the real math_answer reward."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlpost import cli
from rlpost.analysis.value_gradient import accumulate_policy_gradient, flat_gradient, group_advantages, split_half_stats
from rlpost.models.loading import ModelConfig, load_model
from rlpost.tools.diagnose import Thresholds, verdict

from support.paths import TESTS


def metrics(p1: float, pn: float, signal: float, n: int = 8) -> dict[str, float]:
    return {
        "diag/pass@1": p1,
        f"diag/pass@{n}": pn,
        "diag/headroom": pn - p1,
        "diag/signal_fraction": signal,
        "diag/reward_std": 0.1,
    }


@pytest.mark.parametrize(
    "p1, pn, signal, expected, phrase",
    [
        (0.95, 1.0, 0.1, "saturated", "pass@1 = 0.950 >= max_pass1 = 0.9"),
        (0.0, 0.02, 0.02, "out_of_reach", "pass@8 = 0.020 < min_pass_at_n = 0.05"),
        (0.3, 0.7, 0.6, "promising", "reachable headroom 0.400"),
        (0.5, 0.55, 0.6, "weak", "headroom 0.050 < min_headroom = 0.1"),
        (0.3, 0.7, 0.1, "weak", "signal_fraction 0.100 < min_signal_fraction = 0.25"),
    ],
)
def test_verdict_by_hand(p1, pn, signal, expected, phrase):
    word, reasons = verdict(metrics(p1, pn, signal), Thresholds(), 8)
    assert word == expected
    assert any(phrase in r for r in reasons), reasons


def test_thresholds_are_config_fields():
    m = metrics(0.5, 0.55, 0.6)
    assert verdict(m, Thresholds(min_headroom=0.04), 8)[0] == "promising"


KNOWN = [
    "model=tiny-random",
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.tools:first_c_correct'}}]",
    "correct_term=callable",  # its score is correctness: the criterion pass@k rests on
    "max_new_tokens=4",
    "progress=false",
]


def test_diagnose_tiny_random_with_known_counts(tmp_path, monkeypatch, capsys):
    # train rows with 0, 1, 2, 4 correct of 4 samples: pass@1 = 0.4375, pass@4 = 0.75, signal 2 of 4 groups
    monkeypatch.syspath_prepend(str(TESTS))
    rows = [{"question": f"Count to {i}.", "answer": "1", "n_correct": c} for i, c in enumerate([0, 1, 2, 4])]
    data, held = tmp_path / "rows.jsonl", tmp_path / "held.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    held.write_text(json.dumps({"question": "Other.", "answer": "1", "n_correct": 0}) + "\n")
    out = tmp_path / "diag.json"
    argv = ["diagnose", *KNOWN, "data=jsonl", f"data.path={data}", f"data.eval_split={held}", "data.eval_size=1"]
    argv += ["prompts=4", "samples=4"]
    assert cli.main([*argv, f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    result = json.loads(out.read_text())
    m = result["metrics"]
    assert m["diag/pass@1"] == pytest.approx(0.4375) and m["diag/pass@4"] == pytest.approx(0.75)
    assert m["diag/signal_fraction"] == 0.5
    # the value-gradient signal on the 4 prompts: only prompts 1 and 2 have unequal rewards, one in each half
    assert m["diag/value_gradient_signal"] >= 0.0 and -1.0 <= m["diag/value_gradient_agreement"] <= 1.0
    assert m["diag/value_gradient_noise"] > 0.0 and m["diag/entropy"] > 0.0
    assert result["verdict"] == "promising"
    assert "verdict: PROMISING" in capsys.readouterr().out
    # a stricter signal threshold turns it weak
    assert (
        cli.main([*argv, "thresholds.min_signal_fraction=0.6", f"out={out}", f"hydra.run.dir={tmp_path / 'h2'}"]) == 0
    )
    assert json.loads(out.read_text())["verdict"] == "weak"


def test_diagnose_tiny_random_on_arithmetic_is_out_of_reach(tmp_path):
    # a random 2-layer model cannot do arithmetic: every math_answer reward is 0
    out = tmp_path / "diag.json"
    argv = ["diagnose", "model=tiny-random", "prompts=4", "samples=4", "max_new_tokens=4", "progress=false"]
    argv += ["data.train_size=8", "data.eval_size=4", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]
    assert cli.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["verdict"] == "out_of_reach"
    assert result["metrics"]["diag/pass@4"] == 0.0 and result["metrics"]["diag/signal_fraction"] == 0.0


def test_diagnose_bad_input(tmp_path, capsys):
    cases = [
        (["samples=1"], "samples=1 must be at least 2"),
        (["thresholds.min_headroom=2"], "thresholds.min_headroom=2.0 must be in [0, 1]"),
        (["prompts=300"], "prompts=300 but split=train has 256 rows"),
        (["thresholds.min_headrom=0.2"], "Did you mean 'min_headroom'?"),
        (["gradient_prompts=3"], "gradient_prompts=3 must be 0 (skip) or an even number"),
        (["thresholds.min_gradient_agreement=2"], "min_gradient_agreement=2.0 must be in [-1, 1]"),
        # a judged score has no correctness, so no pass@k to base a verdict on
        (["reward=rubric"], "rlpost diagnose (pass@1, pass@n, headroom) needs a correctness criterion"),
        (["correct_term=null"], "needs a correctness criterion"),
    ]
    for args, message in cases:
        assert cli.main(["diagnose", "model=tiny-random", *args, f"hydra.run.dir={tmp_path / 'h'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "h").exists()


def test_value_gradient_statistics_by_hand():
    # g1 = [3, 4], g2 = [4, 3]: dot 24, norms 5 and 5 -> signal sqrt(24), agreement 24/25, noise |[-1, 1]| / 2
    stats = split_half_stats(torch.tensor([3.0, 4.0]), torch.tensor([4.0, 3.0]))
    assert stats["value_gradient_signal"] == pytest.approx(math.sqrt(24))
    assert stats["value_gradient_agreement"] == pytest.approx(0.96)
    assert stats["value_gradient_noise"] == pytest.approx(math.sqrt(2) / 2)
    # opposite halves: no shared direction, signal 0, agreement -1
    opposite = split_half_stats(torch.tensor([1.0, 0.0]), torch.tensor([-1.0, 0.0]))
    assert opposite["value_gradient_signal"] == 0.0 and opposite["value_gradient_agreement"] == -1.0
    # GRPO advantages of [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(1/3) -> +-0.5 / (0.57735 + 1e-4)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    assert group_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0]])).tolist()[0] == pytest.approx([a, -a, -a, a])


def test_policy_gradient_is_the_gradient_of_the_sampled_log_likelihood():
    # accumulate_policy_gradient with A = 1 adds grad sum_t log pi(y_t | x, y<t); the model's own mean NLL over the
    # same tokens (labels) gives the same gradient times -T
    model = load_model(ModelConfig(source="tiny_random"))
    prompt, sample = [1, 2, 3], [4, 5, 6, 7]
    model.zero_grad(set_to_none=True)
    _, tokens = accumulate_policy_gradient(model, prompt, [sample], [1.0], scale=1.0)
    ours = flat_gradient(model)
    model.zero_grad(set_to_none=True)
    labels = torch.tensor([[-100] * len(prompt) + sample])
    loss = model(input_ids=torch.tensor([prompt + sample]), labels=labels).loss
    (-loss * len(sample)).backward()
    assert tokens == 4 and torch.allclose(ours, flat_gradient(model), atol=1e-5, rtol=1e-4)
    model.zero_grad(set_to_none=True)
    accumulate_policy_gradient(model, prompt, [sample], [0.0], scale=1.0)  # a zero advantage adds nothing
    assert flat_gradient(model).abs().sum() == 0.0
