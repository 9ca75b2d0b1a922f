"""rlpost diagnose (seed 004 #13): the verdict on hand-made metrics for every branch, then the command
on the tiny random model with a reward of known counts and with the real math_answer reward."""

from __future__ import annotations

import json

import pytest
from paths import SUPPORT

from rlpost import cli
from rlpost.tools.diagnose import Thresholds, verdict

TESTS = SUPPORT


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
    "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support_tools:first_c_correct'}}]",
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
    ]
    for args, message in cases:
        assert cli.main(["diagnose", "model=tiny-random", *args, f"hydra.run.dir={tmp_path / 'h'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "h").exists()
