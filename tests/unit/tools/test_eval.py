"""rlpost eval: pass@k / accuracy / reward spread / mean length by hand, the real math_answer on fixed
completions, the CLI on the tiny model (greedy and sampled, a run directory, a LoRA run), and
eval.every really evaluating and logging during training."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlpost import cli
from rlpost.evaluation.evaluate import majority_correct, pass_at_k, sample_metrics
from rlpost.scoring.correctness import Correctness
from rlpost.scoring.score import score
from rlpost.scoring.terms import build_reward_terms

from support.paths import TESTS
from support.trainer import TINY, weighted_sum

FIRST = Correctness(0, "first", 1.0)  # the first term decides correctness: score >= 1


def test_pass_at_k_unbiased_estimator_by_hand():
    # 1 - C(n-c, k) / C(n, k), n = 4
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 1, 2) == pytest.approx(1 - 3 / 6)  # C(3,2)=3, C(4,2)=6
    assert pass_at_k(4, 2, 2) == pytest.approx(1 - 1 / 6)
    assert pass_at_k(4, 3, 2) == 1.0  # C(1,2) = 0
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)  # pass@1 = c / n
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_sample_metrics_by_hand():
    # first term (correctness) per prompt, n = 4: c = 0, 1, 2, 4; second term always 1 with weight 0.5
    first = torch.tensor([[0.0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    scores = torch.stack([first, torch.ones(4, 4)], dim=2)  # [P=4, n=4, R=2]
    lengths = torch.tensor([[2, 4, 6, 8]] * 4)
    m = sample_metrics(scores, weighted_sum([1.0, 0.5]), lengths, [1, 2, 8], FIRST, "s")
    assert m["s/accuracy"] == pytest.approx(7 / 16)
    assert m["s/pass@1"] == pytest.approx((0 + 0.25 + 0.5 + 1) / 4)
    assert m["s/pass@2"] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)  # 0.583
    assert m["s/pass@4"] == pytest.approx(0.75)  # k = n always reported; k = 8 > n is not
    assert "s/pass@8" not in m
    assert m["s/headroom"] == pytest.approx(0.75 - 0.4375)
    assert m["s/reward"] == pytest.approx(7 / 16 + 0.5)
    # population std of [1,0,0,0] = sqrt(0.1875) = 0.4330, of [1,1,0,0] = 0.5, others 0
    assert m["s/reward_std"] == pytest.approx((math.sqrt(0.1875) + 0.5) / 4)
    assert m["s/signal_fraction"] == 0.5
    assert m["s/mean_length"] == 5.0 and m["s/num_prompts"] == 4
    # best-of-k: reward = first + 0.5; the first k samples' max per prompt, averaged: k = 1 -> (0 + 1 + 1 + 1) / 4
    # + 0.5; k = 2, 4 -> prompts 1-3 reach 1 within their first sample already, prompt 0 never -> same 0.75 + 0.5
    assert (m["s/reward_best@1"], m["s/reward_best@2"], m["s/reward_best@4"]) == (1.25, 1.25, 1.25)
    late = torch.tensor([[0.0, 0, 0, 2.0], [float("nan"), 1.0, 0, 0]]).unsqueeze(2)  # the best comes last; NaN skipped
    b = sample_metrics(late, weighted_sum([1.0]), torch.ones(2, 4), [1, 2], None, "s")
    assert (b["s/reward_best@1"], b["s/reward_best@2"], b["s/reward_best@4"]) == (0.0, 0.5, 1.5)
    assert "s/reward_best@8" not in m


def test_majority_vote_and_avg_at_n_by_hand():
    # majority_correct: the most frequent answer wins, ties go to the answer seen first, None does not vote
    assert majority_correct(["5", "6", "5"], [True, False, True]) is True
    assert majority_correct(["6", "5", "6", None, None], [False, True, False, False, False]) is False
    assert majority_correct(["6", "5"], [False, True]) is False  # a tie: "6" came first
    assert majority_correct([None, "5"], [False, True]) is True and majority_correct([None], [True]) is False
    # 2 prompts, n = 3; prompt 0 answers 5 (right), 7, 5 (right); prompt 1: 8 (right), 9, 9
    first = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    answers = [["5", "7", "5"], ["8", "9", "9"]]
    m = sample_metrics(first.unsqueeze(2), weighted_sum([1.0]), torch.ones(2, 3), [1, 2], FIRST, "s", answers)
    assert m["s/avg@3"] == pytest.approx((2 / 3 + 1 / 3) / 2)  # 0.5
    # maj@1 = first sample right: 1, 1; maj@2: tie 5/7 -> 5 (right), tie 8/9 -> 8 (right); maj@3: 5 right, 9 wrong
    assert (m["s/maj@1"], m["s/maj@2"], m["s/maj@3"]) == (1.0, 1.0, 0.5)
    assert "s/maj@1" not in sample_metrics(first.unsqueeze(2), weighted_sum([1.0]), torch.ones(2, 3), [1], FIRST, "s")


def test_unscorable_samples_are_wrong_for_pass_at_k_and_skipped_in_means():
    scores = torch.tensor([[[float("nan")], [1.0]]])  # one prompt, n = 2: unscorable, correct
    m = sample_metrics(scores, weighted_sum([1.0]), torch.tensor([[3, 5]]), [1], FIRST, "s")
    assert m["s/accuracy"] == 1.0 and m["s/pass@1"] == 0.5 and m["s/pass@2"] == 1.0
    assert m["s/reward"] == 1.0 and m["s/reward_std"] == 0.0


def test_math_answer_on_fixed_completions():
    funcs, _, weights = build_reward_terms([{"name": "math_answer"}])
    rows = [
        {"prompt": [{"role": "user", "content": "Calculate 2 + 3."}], "answer": "5"},
        {"prompt": [{"role": "user", "content": "Calculate 3 * 4."}], "answer": "12"},
    ]
    completions = ["5", "The answer is 6", "12", "x = 12."]  # prompt-major, n = 2
    scores = score(rows, completions, 2, funcs)
    assert scores[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    lengths = torch.tensor([[1, 4], [2, 4]])
    m = sample_metrics(scores.view(2, 2, 1), weighted_sum(weights), lengths, [1, 2], FIRST, "s")
    assert m["s/pass@1"] == pytest.approx((0.5 + 1.0) / 2) and m["s/pass@2"] == 1.0
    assert m["s/accuracy"] == 0.75 and m["s/mean_length"] == 2.75
    assert m["s/signal_fraction"] == 0.5  # only the first prompt's group has a reward difference


# ---------------------------------------------------------------- the command on the tiny model

KNOWN_REWARD = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.tools:first_c_correct'}}]"


@pytest.fixture(scope="module")
def known_data(tmp_path_factory):
    """4 held-out prompts whose groups have exactly 0, 1, 2 and 4 correct samples (first_c_correct)."""
    root = tmp_path_factory.mktemp("data")
    train = [{"question": f"Say {i}.", "answer": str(i), "n_correct": 0} for i in range(6)]
    held = [{"question": f"Count to {i}.", "answer": "1", "n_correct": c} for i, c in enumerate([0, 1, 2, 4])]
    (root / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in train))
    (root / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    return [
        "model=tiny-random",
        "data=jsonl",
        f"data.path={root / 'train.jsonl'}",
        f"data.eval_split={root / 'eval.jsonl'}",
        "data.eval_size=4",
        KNOWN_REWARD,
        "correct_term=callable",  # the callable's score is correctness: it names the criterion
    ]


def test_eval_cli_sampled_and_greedy_on_known_rewards(known_data, tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(TESTS))
    out = tmp_path / "eval.json"
    argv = ["eval", *known_data, "size=4", "samples=4", "pass_k=[1,2]", "max_new_tokens=6", "progress=false"]
    assert cli.main([*argv, f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    record = json.loads(out.read_text())
    r = record["results"]
    assert r["sampled/pass@1"] == pytest.approx(0.4375)
    assert r["sampled/pass@2"] == pytest.approx((0 + 0.5 + 5 / 6 + 1) / 4)
    assert r["sampled/pass@4"] == pytest.approx(0.75)
    assert r["eval/accuracy"] == 0.75  # greedy: one sample each, correct when n_correct >= 1
    assert 1 <= r["sampled/mean_length"] <= 6 and 1 <= r["eval/mean_length"] <= 6
    assert record["model"] == "tiny-random-llama" and record["split"] == "eval"
    assert "sampled/pass@2" in capsys.readouterr().out  # the table


def test_eval_cli_refuses_bad_input_before_loading(known_data, tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    cases = [
        (["size=5"], "size=5 but split=eval has 4 rows"),
        (["greedy=false"], "leave nothing to evaluate"),
        (["model=tiny-random", "run=/nonexistent"], "is not an rlpost run directory"),
        (["sampels=4"], "Did you mean 'samples'?"),
    ]
    for args, message in cases:
        assert cli.main(["eval", *known_data, "size=4", *args, f"hydra.run.dir={tmp_path / 'h'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "h").exists()


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A 2-step tiny-random run with eval.every=1 (through the CLI)."""
    run_dir = tmp_path_factory.mktemp("run") / "run"
    hash_reward = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
    tiny = [o for o in TINY if not o.startswith(("logging.trackers", "train.steps"))]
    argv = ["train", *tiny, hash_reward, "eval.correct_term=callable", "train.steps=2", "eval.every=1", "eval.size=4"]
    argv.append(f"hydra.run.dir={run_dir}")
    assert cli.main(argv) == 0
    return run_dir


def test_eval_every_runs_during_training_and_logs(trained_run):
    rows = [json.loads(line) for line in (trained_run / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 1, 2]  # at_start, every=1 at step 1, at_end (step 2 not twice)
    assert all(math.isfinite(r["eval/reward"]) and r["eval/num_prompts"] == 4 for r in evals)
    train_rows = [r for r in rows if "loss" in r]
    assert [r["step"] for r in train_rows] == [1, 2] and all("reward" in r for r in train_rows)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(next((trained_run / "tensorboard").rglob("events.out.tfevents.*")).parent))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert any("eval/accuracy" in t for t in tags), tags  # the step-1 eval reached tensorboard too


def test_eval_a_run_directory_uses_its_checkpoint_data_and_reward(trained_run, tmp_path):
    out = tmp_path / "eval.json"
    argv = ["eval", f"run={trained_run}", "max_new_tokens=4", "progress=false", f"out={out}"]
    assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    record = json.loads(out.read_text())
    assert record["model_path"] == str(trained_run / "checkpoints" / "final")
    assert record["data"] == "reasoning_gym:basic_arithmetic"
    assert set(record["results"]) >= {"eval/accuracy", "eval/callable", "eval/mean_length"}
    assert record["size"] == 8  # the run's whole held-out split (TINY: data.eval_size=8)
    # a dotted data override applies on top of the run's data node
    assert cli.main([*argv, "data.eval_size=2", f"hydra.run.dir={tmp_path / 'h2'}"]) == 0
    assert json.loads(out.read_text())["size"] == 2
    # model= and run= name two models
    assert cli.main([*argv, "model=tiny-random", f"hydra.run.dir={tmp_path / 'h3'}"]) == 2


def test_eval_and_merge_a_lora_run(tmp_path):
    run_dir = tmp_path / "lora_run"
    hash_reward = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
    argv = ["train", *TINY, hash_reward, "train.steps=1", "model.lora.enabled=true", "model.lora.r=4"]
    assert cli.main([*argv, "eval.at_start=false", "eval.at_end=false", f"hydra.run.dir={run_dir}"]) == 0
    assert (run_dir / "checkpoints" / "final" / "adapter_config.json").is_file()
    out = tmp_path / "eval.json"
    argv = ["eval", f"run={run_dir}", "size=2", "max_new_tokens=4", "progress=false", f"out={out}"]
    assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    assert json.loads(out.read_text())["adapter"] == str(run_dir / "checkpoints" / "final")
    merged = tmp_path / "merged"
    assert (
        cli.main(["merge", "method=lora", f"adapter={run_dir}", f"out={merged}", f"hydra.run.dir={tmp_path / 'm'}"])
        == 0
    )
    assert (merged / "model.safetensors").is_file() and (merged / "tokenizer.json").is_file()


def test_eval_multirun_writes_one_result_per_job_and_a_summary(known_data, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    sweep = tmp_path / "sweep"
    argv = ["eval", "-m", *known_data, "size=4", "samples=0,2", "max_new_tokens=4", "progress=false"]
    assert cli.main([*argv, f"hydra.sweep.dir={sweep}"]) == 0
    results = [json.loads((sweep / job / "eval.json").read_text())["results"] for job in ("0", "1")]
    assert "sampled/pass@2" not in results[0] and results[1]["sampled/pass@2"] == pytest.approx((0 + 1 + 1 + 1) / 4)
    md = (sweep / "sweep_summary.md").read_text()
    assert "| job | overrides | status | eval/callable | eval/accuracy |" in md  # one column per result metric
    assert "| 0 | samples=0 | done | 0.750 | 0.750 |" in md and "| 1 | samples=2 | done | 0.750 | 0.750 |" in md
    assert "sampled/pass@2" in md.splitlines()[2]


def test_train_refuses_a_negative_eval_every_and_an_oversized_periodic_eval(tmp_path, capsys):
    base = ["train", "model=tiny-random", "eval.at_start=false", "eval.at_end=false", f"hydra.run.dir={tmp_path / 'r'}"]
    assert cli.main([*base, "eval.every=-1"]) == 2
    assert "eval.every=-1 must be >= 0" in capsys.readouterr().err
    # eval.every alone (no start/end eval) still needs eval.size <= data.eval_size
    assert cli.main([*base, "eval.every=2", "eval.size=200"]) == 2
    assert "eval.size=200 is larger than data.eval_size=100" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
