"""rlpost train-rm and the reward_model reward term: Bradley-Terry by hand, the pairs file's errors,
a real tiny-random training run through the CLI, the saved folder in plain transformers, the reward
term against a direct forward, and every bad-input path (exit 2, nothing loaded or written).

Bradley-Terry loss: mean over pairs of -log sigmoid(r_c - r_r) = mean log(1 + exp(-(r_c - r_r))).
"""

from __future__ import annotations

import json
import math
import pickle
import random
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, set_seed

from rlpost import cli
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError
from rlpost.dev.make_preferences import perturb
from rlpost.models.loading import ModelConfig, load_tokenizer, tiny_random_folder
from rlpost.reward_model.pairs import RM_META, bradley_terry_loss, encode, read_pairs, render, score_ids
from rlpost.reward_model.train import load_classifier, train_rm
from rlpost.rewards.base import REWARDS
from rlpost.rewards.reward_model import RewardModel

from support.paths import REPO
from support.trainer import TINY, rlpost_trainer

ROOT = REPO
PAIRS = ROOT / "recipes" / "data" / "arith_preferences.jsonl"
TINY_MODEL = ModelConfig(source="tiny_random")
TINY_RM = ["model=tiny-random", "progress=false", "train.learning_rate=1e-3", "train.batch_size=8"]


def write_pairs(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny-random RM trained through the real CLI: 16 pairs, batch 8, 10 steps (5 epochs), lr 1e-3."""
    tmp = tmp_path_factory.mktemp("rm")
    train_file = write_pairs(tmp / "train.jsonl", PAIRS.read_text().splitlines()[:16])
    run_dir = tmp / "run"
    argv = ["train-rm", *TINY_RM, "train.steps=10", f"data.train={train_file}", f"hydra.run.dir={run_dir}"]
    assert cli.main(argv) == 0
    return {"run": run_dir, "model": run_dir / "model", "train": train_file}


def test_bradley_terry_loss_by_hand():
    # d = r_c - r_r = [2, -1]: -log sigmoid(2) = log(1 + e^-2) = 0.126928; -log sigmoid(-1) = log(1 + e) = 1.313262
    # mean = (0.126928 + 1.313262) / 2 = 0.720095
    loss = bradley_terry_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0]))
    assert loss.item() == pytest.approx(0.720095, abs=1e-6)
    assert bradley_terry_loss(torch.zeros(3), torch.zeros(3)).item() == pytest.approx(math.log(2))  # d = 0


def test_reward_trainer_loss_is_bradley_terry_on_our_scores(tmp_path):
    """TRL's RewardTrainer.compute_loss on a collated batch equals bradley_terry_loss of score_ids on
    the same ids: training and the reward term read the same scalar from the same rendering."""
    from datasets import Dataset
    from trl import RewardConfig, RewardTrainer

    model, tok = load_classifier(TINY_MODEL)
    pairs = read_pairs(str(PAIRS))[:4]
    texts = [render(tok, p.prompt, c, True) for p in pairs for c in (p.chosen, p.rejected)]
    ids = encode(tok, texts, 256)
    data = Dataset.from_dict({"chosen_ids": ids[0::2], "rejected_ids": ids[1::2]})
    args = RewardConfig(
        output_dir=str(tmp_path), report_to=[], max_length=None, per_device_train_batch_size=4, bf16=False
    )
    trainer = RewardTrainer(model=model, args=args, train_dataset=data, processing_class=tok)
    batch = trainer.data_collator([data[i] for i in range(4)])
    model.eval()
    with torch.no_grad():
        trl_loss = trainer.compute_loss(model, dict(batch))
    scores = score_ids(model, ids, tok.pad_token_id, batch_size=3)  # other batching, other padding
    ours = bradley_terry_loss(scores[0::2], scores[1::2])
    torch.testing.assert_close(trl_loss, ours, rtol=1e-5, atol=1e-6)


def test_render_conversational_and_plain():
    tok = load_tokenizer(TINY_MODEL)
    chat = render(tok, "Calculate 2 + 2.", "4", conversational=True)
    assert chat == tok.apply_chat_template(
        [{"role": "user", "content": "Calculate 2 + 2."}, {"role": "assistant", "content": "4"}], tokenize=False
    )
    assert chat.endswith("<|im_start|>assistant\n4<|im_end|>\n")
    # GRPO hands over chat prompts and completions as message lists: the same text comes out
    messages = render(
        tok, [{"role": "user", "content": "Calculate 2 + 2."}], [{"role": "assistant", "content": "4"}], True
    )
    assert messages == chat
    assert render(tok, "Q: 2+2? A: ", "4", conversational=False) == "Q: 2+2? A: 4<|im_end|>"
    assert (
        encode(tok, ["a b c d e f g h i j"], 3)[0]
        == tok("a b c d e f g h i j", add_special_tokens=False).input_ids[-3:]
    )


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "p", "chosen": "a"', "not valid JSON"),
        ('["p", "a", "b"]', "expected a JSON object"),
        ('{"prompt": "p", "chosen": "a"}', "missing field 'rejected'"),
        ('{"prompt": "p", "chosen": "", "rejected": "b"}', "field 'chosen' must be a non-empty string"),
        ('{"prompt": "p", "chosen": [{"content": "a"}], "rejected": "b"}', "field 'chosen' must be"),
        ('{"prompt": "p", "chosen": "a", "rejected": "a"}', "chosen and rejected are identical"),
    ],
)
def test_bad_pairs_line_names_file_and_line(tmp_path, line, message):
    good = '{"prompt": "p", "chosen": "a", "rejected": "b"}'
    path = write_pairs(tmp_path / "pairs.jsonl", [good, "", line])  # the bad row is on line 3
    with pytest.raises(ConfigError, match=rf"pairs\.jsonl line 3: {message}"):
        read_pairs(str(path))


def test_bundled_pairs_are_valid_and_disjoint():
    train = read_pairs(str(PAIRS))
    heldout = read_pairs(str(PAIRS.with_name("arith_preferences_heldout.jsonl")))
    assert (len(train), len(heldout)) == (400, 100)
    assert not {p.prompt for p in train} & {p.prompt for p in heldout}
    # perturbations never give back the gold: 7 * 8 = 56
    rng = random.Random(0)
    for kind in ("off_by", "wrong_operator", "digit", "sign"):
        assert all(perturb("7 * 8", 56, kind, rng) != 56 for _ in range(50))
    assert perturb("0 * 5", 0, "sign", rng) != 0  # -0 == 0 falls through to off_by


def test_train_rm_moves_parameters_and_lowers_the_loss(trained):
    summary = json.loads((trained["run"] / "summary.json").read_text())
    assert summary["steps"] == 10 and summary["train_pairs"] == 16
    logs = [json.loads(line) for line in (trained["run"] / "metrics.jsonl").read_text().splitlines()]
    losses = [row["loss"] for row in logs if "loss" in row]
    assert len(losses) == 10
    assert sum(losses[-2:]) / 2 < sum(losses[:2]) / 2  # 5 epochs over the same 16 pairs: the BT loss falls

    # the saved folder loads with plain transformers as a 1-label classifier
    loaded = AutoModelForSequenceClassification.from_pretrained(trained["model"])
    tok = AutoTokenizer.from_pretrained(trained["model"])
    assert loaded.config.num_labels == 1 and loaded.config.pad_token_id == tok.pad_token_id is not None
    assert (trained["model"] / "model.safetensors").is_file()
    set_seed(0)  # as train-rm does before loading (seed=0): the same fresh score head
    start, _ = load_classifier(TINY_MODEL)
    moved = {n for n, p in loaded.named_parameters() if not torch.equal(p, dict(start.named_parameters())[n])}
    assert "model.layers.0.self_attn.q_proj.weight" in moved  # the backbone trained, not only the head
    assert "model.embed_tokens.weight" in moved

    # on the pairs it trained on, the saved model beats its start (training loss, recomputed here)
    pairs = read_pairs(str(trained["train"]))

    def bt(model):
        texts = [render(tok, p.prompt, c, True) for p in pairs for c in (p.chosen, p.rejected)]
        s = score_ids(model, encode(tok, texts, 256), tok.pad_token_id, 8)
        return bradley_terry_loss(s[0::2], s[1::2]).item()

    before, after = bt(start), bt(loaded)
    print(f"train-pairs BT loss {before:.4f} -> {after:.4f}; logged {losses[0]:.4f} -> {losses[-1]:.4f}")
    assert after < before - 0.05
    meta = json.loads((trained["model"] / RM_META).read_text())
    assert meta["conversational"] is True and meta["max_length"] == 256
    after = summary["after"]
    assert after["score_mean"] == pytest.approx(meta["score_mean"]) and after["pairs"] == 100
    assert 0.0 <= summary["before"]["accuracy"] <= 1.0


def test_reward_term_is_the_classifier_scalar(trained):
    """The term's value for a hand-made prompt/completion is the plain-transformers forward of the
    chat-template text (independent of rlpost's render), and the normalizations are as documented."""
    folder = trained["model"]
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = [[{"role": "user", "content": "Calculate 3 + 4.\nGive only the final answer."}]] * 3
    completions = [[{"role": "assistant", "content": t}] for t in ("7", "The answer is 9.", "3 + 4 = 7")]
    direct = []
    for p, c in zip(prompts, completions):
        text = tok.apply_chat_template(p + c, tokenize=False)
        with torch.no_grad():
            direct.append(model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, 0].item())

    term = REWARDS.get("reward_model")(RewardModel.Config(path=str(folder), batch_size=2))
    assert term(prompts, completions) == pytest.approx(direct, abs=1e-5)

    r = torch.tensor(direct)
    batch = REWARDS.get("reward_model")(RewardModel.Config(path=str(folder), normalize="batch"))
    expected = ((r - r.mean()) / (r.std(unbiased=False) + 1e-6)).tolist()  # z-score over the 3
    assert batch(prompts, completions) == pytest.approx(expected, abs=1e-4)

    meta = json.loads((folder / RM_META).read_text())
    heldout = REWARDS.get("reward_model")(RewardModel.Config(path=str(folder), normalize="heldout"))
    expected = [(x - meta["score_mean"]) / meta["score_std"] for x in direct]
    assert heldout(prompts, completions) == pytest.approx(expected, abs=1e-4)
    clone = pickle.loads(pickle.dumps(term))  # TRL's rollout workers pickle rewards: the model reloads
    assert clone._model is None and clone(prompts, completions) == pytest.approx(direct, abs=1e-5)


def test_grpo_step_with_the_reward_model(trained, tmp_path):
    run = build_run(
        compose([*TINY, "train.steps=1", "reward=reward_model", f"reward.terms.0.params.path={trained['model']}"])
    )
    trainer = rlpost_trainer(run, tmp_path)
    trainer.train()
    logs = [log for log in trainer.state.log_history if "rewards/reward_model/mean" in log]
    assert logs and math.isfinite(logs[0]["rewards/reward_model/mean"])
    assert logs[0]["rewards/reward_model/std"] > 0  # the classifier separates different completions


def test_reward_term_bad_paths(trained, tmp_path):
    base = ["reward=reward_model", "model=tiny-random"]
    with pytest.raises(ConfigError, match=r"reward\.terms\[0\]\.params\.path: '/nope/rm': no such folder.*train-rm"):
        build_run(compose([*base, "reward.terms.0.params.path=/nope/rm"]))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="has no config.json"):
        build_run(compose([*base, f"reward.terms.0.params.path={tmp_path / 'empty'}"]))
    causal = tiny_random_folder(TINY_MODEL)
    with pytest.raises(ConfigError, match=r"not a sequence classifier \(architectures: LlamaForCausalLM\)"):
        build_run(compose([*base, f"reward.terms.0.params.path={causal}"]))
    two = tmp_path / "two"
    two.mkdir()
    (two / "config.json").write_text('{"architectures": ["LlamaForSequenceClassification"], "num_labels": 2}')
    with pytest.raises(ConfigError, match="num_labels=2"):
        build_run(compose([*base, f"reward.terms.0.params.path={two}"]))
    bare = tmp_path / "bare"  # a classifier trained elsewhere: no rlpost metadata
    bare.mkdir()
    (bare / "config.json").write_text((trained["model"] / "config.json").read_text())
    with pytest.raises(ConfigError, match=r"params\.normalize: 'heldout' needs the held-out score mean/std"):
        build_run(compose([*base, f"reward.terms.0.params.path={bare}", "reward.terms.0.params.normalize=heldout"]))
    with pytest.raises(ConfigError, match=r"Missing required value reward\.terms\[0\]\.params\.path"):
        build_run(compose(base))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["data.train=/nope.jsonl"], "data.train='/nope.jsonl': no such file"),
        (["train.epochz=2"], "Unknown key train.epochz. Did you mean 'epochs'?"),
        (["model=tiny-randm"], "Did you mean 'tiny-random'?"),
        (["model.lora.enabled=true"], "train-rm does full fine-tuning"),
        (["train.batch_size=0"], "train.batch_size=0 must be at least 1"),
        (["train.steps=0"], "train.steps=0 must be at least 1"),
    ],
)
def test_train_rm_bad_input_exits_2_before_any_load(tmp_path, capsys, args, message):
    run_dir = tmp_path / "run"
    assert cli.main(["train-rm", "model=tiny-random", *args, f"hydra.run.dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlpost: error:") and message in err
    assert not run_dir.exists()


def test_train_rm_bad_row_exits_2_naming_file_and_line(tmp_path, capsys):
    bad = write_pairs(tmp_path / "bad.jsonl", ['{"prompt": "p", "chosen": "a", "rejected": "b"}', '{"prompt": "p"}'])
    run_dir = tmp_path / "run"
    assert cli.main(["train-rm", "model=tiny-random", f"data.heldout={bad}", f"hydra.run.dir={run_dir}"]) == 2
    assert f"{bad} line 2: missing field 'chosen'" in capsys.readouterr().err
    assert not run_dir.exists()


def test_train_rm_refuses_bad_rows_in_process_too(tmp_path):
    bad = write_pairs(tmp_path / "bad.jsonl", ["not json"])
    with pytest.raises(ConfigError, match="bad.jsonl line 1: not valid JSON"):
        train_rm(compose(["model=tiny-random", f"data.train={bad}"], "train_rm"), tmp_path / "run")
    assert not (tmp_path / "run").exists()
