"""The trainer class comes from a registry keyed by the bundle's ``trainer:`` key, not an if-chain."""

from __future__ import annotations

import typing

import pytest

from rlpost.algorithms import TRAINERS, trainer_class
from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.confdir import group_options
from rlpost.core.config import AlgorithmNode
from rlpost.core.errors import ConfigError
from rlpost.trainer import RLPostTrainer

from support.trainer import HASH_REWARD, TINY

EXPECTED = {
    "ppo": "PPOTrainer",
    "ppo_or": "PPOTrainer",
    "regen": "RegenTrainer",
    "ug_ttt": "UGTTTTrainer",
}  # every other bundle: grpo


def test_the_registry_and_the_schema_name_the_same_trainers():
    allowed = typing.get_args(typing.get_type_hints(AlgorithmNode, include_extras=True)["trainer"])
    assert set(allowed) == set(TRAINERS)


@pytest.mark.parametrize("bundle", sorted(group_options("algorithm")))
def test_each_bundle_names_its_trainer(bundle, tmp_path):
    extra = [f"algorithm.replay=['{tmp_path}']"] if bundle == "regen" else []
    cfg = compose([*TINY, HASH_REWARD, f"algorithm={bundle}", *extra])
    node = cfg.algorithm
    want = EXPECTED.get(bundle, "RLPostTrainer")
    assert node.trainer == {"PPOTrainer": "ppo", "RegenTrainer": "regen", "UGTTTTrainer": "ug_ttt"}.get(want, "grpo")

    class Run:  # trainer_class reads only algorithm.trainer (the replay folder is checked by build_run)
        class algorithm:  # noqa: N801
            trainer = node.trainer

    cls = trainer_class(Run)
    assert cls.__name__ == want and issubclass(cls, RLPostTrainer)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=gepo", "+algorithm.critic={kind: head}"], "algorithm.critic is set but algorithm.trainer=grpo"),
        (["algorithm=ppo", "algorithm.trainer=grpo"], "algorithm.critic is set but algorithm.trainer=grpo"),
        (["algorithm=grpo", "algorithm.trainer=ppo"], "algorithm.trainer=ppo needs algorithm.critic"),
        (["algorithm=grpo", "algorithm.trainer=regen"], "algorithm.trainer=regen needs algorithm.replay"),
        (["algorithm=ug_ttt", "algorithm.trainer=grpo"], "algorithm.ensemble is set but algorithm.trainer=grpo"),
        (["algorithm=grpo", "algorithm.trainer=ug_ttt"], "algorithm.trainer=ug_ttt needs algorithm.ensemble"),
        (["algorithm.trainer=sft"], r"Invalid value algorithm.trainer='sft'. Valid choices: grpo, ppo, regen, ug_ttt"),
    ],
)
def test_a_trainer_and_the_keys_it_reads_go_together(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_run(compose([*TINY, HASH_REWARD, *overrides]))
