"""Build plain-TRL and rlpost trainers on the same composed config (no CLI, no mocks)."""

from __future__ import annotations

from pathlib import Path

from trl import GRPOConfig, GRPOTrainer

from rlpost.algorithms import trainer_class
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.data.sources import load_datasets
from rlpost.models.loading import load_model, load_tokenizer, peft_config
from rlpost.trainer import RLPostTrainer

TINY = [
    "model=tiny-random",
    "train.max_completion_length=8",
    "train.steps=3",
    "train.learning_rate=1e-3",
    "data.train_size=32",
    "data.eval_size=8",
    "eval.size=8",
    "logging.trackers=[]",
    "logging.progress=false",
]
HASH_REWARD = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"


def weighted_sum(weights):
    """The default ``reward.combine`` (weighted_sum) over ``weights`` [R], as evaluate() takes it."""
    import torch

    from rlpost.combine.weighted_sum import WeightedSum

    combine = WeightedSum(WeightedSum.Config())
    return lambda terms, group_size: combine(terms, torch.as_tensor(weights).to(terms), group_size)


def make_run(overrides: list[str]):
    return build_run(compose([*TINY, HASH_REWARD, *overrides]))


def grpo_args(run, out: Path, *, config_class: type[GRPOConfig] = GRPOConfig, **trl_overrides) -> GRPOConfig:
    return config_class(**{**run.grpo_config_kwargs(str(out)), **trl_overrides})


def train_plain_trl(
    run, out: Path, trainer_class: type[GRPOTrainer] = GRPOTrainer, config_class=GRPOConfig, **trl_overrides
) -> GRPOTrainer:
    """Plain TRL on the run's model and data: GRPOTrainer, or a subclass such as trl.experimental's GMPOTrainer."""
    train_set, _ = load_datasets(run.data)
    trainer = trainer_class(
        model=load_model(run.model),
        reward_funcs=run.reward.funcs,
        args=grpo_args(run, out, config_class=config_class, **trl_overrides),
        train_dataset=train_set,
        processing_class=load_tokenizer(run.model),
    )
    trainer.train()
    return trainer


def rlpost_trainer(run, out: Path, **kwargs) -> RLPostTrainer:
    """An RLPostTrainer on the run's model and data, not yet trained."""
    train_set, _ = load_datasets(run.data)
    return trainer_class(run)(
        model=load_model(run.model),
        args=grpo_args(run, out),
        train_dataset=train_set,
        processing_class=load_tokenizer(run.model),
        peft_config=peft_config(run.model),
        run=run,
        **kwargs,
    )


def train_rlpost(run, out: Path, **kwargs) -> RLPostTrainer:
    trainer = rlpost_trainer(run, out, **kwargs)
    trainer.train()
    return trainer


def step_logs(trainer) -> list[dict]:
    return [log for log in trainer.state.log_history if "loss" in log and "grad_norm" in log]


def grouped_prompts():
    """Two prompts x G=3, left-padded to 7 tokens (the second prompt is 5 long): ids, mask [6, 7]."""
    import torch

    torch.manual_seed(0)
    long, short = torch.randint(3, 1000, (7,)), torch.randint(3, 1000, (5,))
    ids = torch.stack([long] * 3 + [torch.cat([torch.zeros(2, dtype=torch.long), short])] * 3)
    mask = torch.ones_like(ids)
    mask[3:, :2] = 0
    return ids, mask
