"""rlpost/sft: targets from the row's columns, the job built before any model loads, and one batch of the real
SFTTrainer checked by hand: the labels are the target's tokens and EOS, the prompt is masked out, and the loss is
the mean negative log-likelihood of those tokens alone."""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlpost.app import compose
from rlpost.core.errors import ConfigError
from rlpost.models.loading import load_model, load_tokenizer
from rlpost.sft.config import build_job
from rlpost.sft.targets import check_template, render_targets, sft_dataset
from rlpost.sft.train import make_trainer

from support.paths import REPO

TINY = ["model=tiny-random", "data.train_size=16", "data.eval_size=4", "eval.size=4", "logging.progress=false"]
ROWS = [
    {"prompt": "p", "answer": "-4", "metadata": '{"expression": "5 - 9", "answer": "ignored"}'},
    {"prompt": "q", "answer": "12", "metadata": {"expression": "3 * 4"}},
]


def test_targets_read_columns_and_metadata_keys():
    assert render_targets("{expression} = {answer}", ROWS) == ["5 - 9 = -4", "3 * 4 = 12"]  # the column wins
    assert render_targets("{metadata[expression]}", ROWS) == ["5 - 9", "3 * 4"]
    assert render_targets("{answer}", [{"prompt": "p", "answer": "7", "metadata": "not json"}]) == ["7"]
    assert check_template("{expression} = {answer:>3}") == ["expression", "answer"]


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            "{expresion} = {answer}",
            "row 0 of the training data has no field 'expresion'; its fields: answer, expression",
        ),
        ("{answer", "is not a Python format string"),
        ("{} = {answer}", "every field needs a name"),
        ("  ", "target is empty"),
    ],
)
def test_bad_templates_name_the_problem(template, message):
    with pytest.raises(ConfigError, match="target") as err:
        render_targets(template, ROWS)
    assert message in str(err.value)


def test_the_job_is_built_before_any_model_loads():
    job = build_job(compose([*TINY, 'target="{expression} = {answer}"'], "sft"))
    assert len(job.prompts) == len(job.targets) == 16 and len(job.eval_rows) == 4
    for prompt, target in zip(job.prompts, job.targets):  # "5 - 9 = -4": the question's expression and its value
        assert re.fullmatch(r"\d+ [-+*] \d+ = -?\d+", target), target
        expression, answer = target.split(" = ")
        assert f"Calculate {expression}." in prompt[-1]["content"] and eval(expression) == int(answer)
    assert job.run.correct is not None and job.run.settings.eval.objective == "eval/accuracy"
    assert job.run.settings.train.max_completion_length == 32  # eval.max_new_tokens: what held-out generation uses


def test_sft_recipes_compose_and_build():
    recipes = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml") if "Launch: rlpost sft" in p.read_text())
    assert "sft_demo_bound" in recipes
    for recipe in recipes:
        job = build_job(compose([f"recipe={recipe}", "model=tiny-random"], "sft"))
        assert job.settings.target and job.settings.train.steps >= 1
    job = build_job(compose(["recipe=sft_demo_bound", "model=tiny-random"], "sft"))
    assert job.settings.train.prompts_per_step == 2 and not job.settings.train.shuffle
    assert all(re.fullmatch(r"\d+ [-+*] \d+ = -?\d+", t) for t in job.targets)


@pytest.fixture(scope="module")
def trainer_and_job(tmp_path_factory):
    overrides = [*TINY, 'target="{expression} = {answer}"', "train.prompts_per_step=4", "train.shuffle=false"]
    job = build_job(compose(overrides, "sft"))
    tokenizer, model = load_tokenizer(job.settings.model), load_model(job.settings.model)
    rows = sft_dataset(tokenizer, job.prompts, job.targets)
    trainer = make_trainer(job.settings, model, tokenizer, rows, tmp_path_factory.mktemp("sft"), [])
    return trainer, job, tokenizer


def test_one_batch_labels_are_the_target_and_eos_only(trainer_and_job):
    trainer, job, tokenizer = trainer_and_job
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["input_ids"].shape[0] == 4
    for row in range(4):  # shuffle=false: the first rows, in order; each checked against its own tokenization
        context = tokenizer.apply_chat_template(job.prompts[row], add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(context, add_special_tokens=False)["input_ids"]
        target_ids = tokenizer(job.targets[row], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        n = len(prompt_ids) + len(target_ids)
        ids, labels = batch["input_ids"][row].tolist(), batch["labels"][row].tolist()
        assert ids[:n] == prompt_ids + target_ids
        assert labels[: len(prompt_ids)] == [-100] * len(prompt_ids)  # the prompt is masked out
        assert labels[len(prompt_ids) : n] == target_ids  # the target and its EOS are trained
        assert set(labels[n:]) <= {-100}  # padding
        assert batch["attention_mask"][row, :n].all() and not batch["attention_mask"][row, n:].any()
        assert tokenizer.decode(labels[len(prompt_ids) : n - 1]) == job.targets[row]


def test_the_loss_is_the_mean_nll_of_the_completion_tokens(trainer_and_job):
    trainer, _, _ = trainer_and_job
    batch = {k: v.to(trainer.model.device) for k, v in next(iter(trainer.get_train_dataloader())).items()}
    with torch.no_grad():
        loss = trainer.compute_loss(trainer.model, dict(batch))
        logits = trainer.model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    gold = batch["labels"][:, 1:]  # token t+1 is predicted at t
    keep = gold != -100
    logp = torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, gold.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    by_hand = -(logp * keep).sum() / keep.sum()
    assert math.isfinite(loss.item()) and abs(loss.item() - by_hand.item()) < 1e-4 * max(1.0, by_hand.item())


def test_trl_defaults_that_would_change_the_run_are_set(trainer_and_job):
    args = trainer_and_job[0].args
    assert not args.bf16 and not args.fp16  # hardware=cpu: fp32 (TRL's SFTConfig defaults to bf16)
    assert not args.gradient_checkpointing  # TRL's SFTConfig defaults to on
    assert args.train_sampling_strategy == "sequential" and args.gradient_accumulation_steps == 1
    assert args.per_device_train_batch_size == 4 and args.max_steps == 20


def test_lora_trains_the_adapters_only(tmp_path):
    job = build_job(compose([*TINY, "model.lora.enabled=true", "model.lora.r=4"], "sft"))
    tokenizer, model = load_tokenizer(job.settings.model), load_model(job.settings.model)
    rows = sft_dataset(tokenizer, job.prompts, job.targets)
    trainer = make_trainer(job.settings, model, tokenizer, rows, tmp_path, [])
    trainable = [name for name, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
