"""The naming rule and the component contract (issue 17 items 5 and 6), checked over every registry.

    conf/<group>/<name>.yaml  <->  rlpost/<kind>/<name>.py  <->  registry name <name>
    e.g. conf/algorithm/loss/output_reset.yaml <-> rlpost/losses/output_reset.py <-> LOSSES "output_reset"

A component folder (rlpost/<kind>/) holds ``base.py`` (the kind's base class, a
``rlpost.core.component.Component``) and one file per registered component; the few other modules still
there are listed in ``HELPERS`` with the reason. Every exception to the rule is listed below with its
reason, so a new component either follows the rule or adds itself here (and to docs/configuration.md,
"The naming rule").

Algorithm bundles (conf/algorithm/*.yaml) extend the ``grpo`` bundle (or a bundle that does) through
their defaults list and state only what differs from it. The base is a real, selectable bundle and not
a hidden ``_base.yaml``: Hydra 1.3 has no private options, so any file in ``conf/algorithm/`` would be a
choice of ``algorithm=`` (listed by ``--help`` and composed by tests/config/test_compose.py like every option).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.advantages.base import ADVANTAGES, Advantage
from rlpost.combine.base import COMBINERS, Combine
from rlpost.core.component import Component
from rlpost.core.registry import Registry
from rlpost.corrections.base import CORRECTIONS, Correction
from rlpost.envs.base import ENVS, Environment
from rlpost.grad.base import GRAD_TRANSFORMS, GradTransform
from rlpost.judges.base import JUDGES, Judge
from rlpost.losses.base import LOSSES, PolicyLoss
from rlpost.regularizers.base import REGULARIZERS, Regularizer
from rlpost.rewards.base import REWARDS, Reward
from rlpost.rollouts.base import ROLLOUTS, RolloutStrategy
from rlpost.select.base import SELECTORS, Selector
from rlpost.transforms.base import TRANSFORMS, Transform

from support.paths import REPO

ROOT = REPO
CONF = ROOT / "conf"
PACKAGE = ROOT / "rlpost"

# kind folder (rlpost/<kind>/) -> (its registry, its base class, its conf group or None)
KINDS: dict[str, tuple[Registry, type, str | None]] = {
    "advantages": (ADVANTAGES, Advantage, "algorithm/advantage"),
    "losses": (LOSSES, PolicyLoss, "algorithm/loss"),
    "regularizers": (REGULARIZERS, Regularizer, "algorithm/regularizers"),
    "grad": (GRAD_TRANSFORMS, GradTransform, "algorithm/grad"),
    "corrections": (CORRECTIONS, Correction, "algorithm/correction"),
    "rollouts": (ROLLOUTS, RolloutStrategy, "algorithm/rollout"),
    "select": (SELECTORS, Selector, "algorithm/select"),
    "rewards": (REWARDS, Reward, "reward"),
    "combine": (COMBINERS, Combine, "reward/combine"),
    "transforms": (TRANSFORMS, Transform, "data/transform"),
    "envs": (ENVS, Environment, "data/env"),
    "judges": (JUDGES, Judge, None),  # no conf group: see NO_YAML
}

# ---- the exceptions, each with its reason ------------------------------------------------------
# (conf group, option) -> (the registered component(s) it configures, why the names differ)
PRESETS: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("algorithm/advantage", "group_center"): (("group_norm",), "Dr. GRPO's advantage: group_norm with scale none"),
    ("algorithm/advantage", "rloo"): (("group_norm",), "RLOO's advantage: group_norm with a leave-one-out baseline"),
    ("algorithm/loss", "clip_higher"): (("clip",), "DAPO's clip-higher: clip with epsilon_high 0.28"),
    ("reward", "math_answer_format"): (("math_answer", "format"), "a two-term reward: correctness + a format bonus"),
}
# (kind, registered name) -> why it has no conf/<group>/<name>.yaml
NO_YAML: dict[tuple[str, str], str] = {
    ("rewards", "callable"): (
        "its one param is the import path of the user's own function, which no yaml can default; it is set "
        "in reward.terms (docs/configuration.md, 'Plugging in your own TRL reward function')"
    ),
    ("judges", "local"): "a judge is chosen inside a reward's params (judge.backend), not by a config group",
    ("judges", "openai"): "a judge is chosen inside a reward's params (judge.backend), not by a config group",
}
# conf groups that are no registry's
NOT_A_REGISTRY: dict[str, str] = {
    "algorithm": "bundles: presets of the whole algorithm node (checked below), not components",
    "algorithm/safety": "presets of the one SafetySettings dataclass (the stability kit), not a registry",
    "model": "presets of ModelConfig",
    "data": "presets of DataConfig",
    "hardware": "presets of HardwareConfig",
    "recipe": "@package _global_ overrides of the groups above (recipes/)",
    "eval_sets": "presets of EvalSetConfig, named in eval.sets=[...] (rlpost/evaluation/sets.py), not a group",
}
# modules in a component folder that are not a component, and why they are still there
HELPERS: dict[str, str] = {
    "advantages/spans.py": "token spans from decoded text, shared by routed and segments",
    "advantages/term_advantage.py": "per-term group-normalized advantages, shared by routed and segments",
    "losses/aggregation.py": "the one explicit loss reduction (not a choice of algorithm/loss)",
    "losses/diagnostics.py": "ratio and output-reset diagnostics shared by several losses",
    "losses/kl.py": "algorithm.kl: its settings and KL estimators (not a registered choice)",
    "regularizers/kl.py": "the KL term in the loss, built from algorithm.kl (not a registered choice)",
    "regularizers/air_sampler.py": "AIR's whole-intent batch sampler (its sampler member)",
    "grad/subspace.py": "the reference subspace shared by trusted_projection and direction_monitor",
    "rewards/code_runner.py": "the jailed child that loads code_exec's candidate program (imports nothing from rlpost)",
    "rewards/code_judge.py": "the judge process that runs code_exec's tests and alone writes the verdict",
    "rewards/embeddings.py": "sentence embeddings for group_diversity and core",
    "rewards/qe_model.py": "the QE model (COMET or a classifier folder) of qe_lid's model estimator",
    "rewards/pared_features.py": "the (prompt, response) features of pared's discriminator",
    "rewards/group.py": "GroupReward, the base of the group-level rewards",
    "rewards/preference.py": "order-swapped pairwise judging for pairwise_preference and rank_judge",
    "rewards/rubric_writer.py": "the rubric-writing model of dynamic_rubric",
    "rewards/rubric_coevolution.py": "the co-evolving writer's training of dynamic_rubric",
    "rewards/rubric_memory.py": "AMARIS's evaluation memory and decision rule (rubric revise, rlpost revise-rubrics)",
    "rewards/rubric_revision.py": "AMARIS's in-loop background revision of the rubric reward",
    "rewards/sandbox.py": "the bubblewrap / subprocess sandbox of code_exec",
    "rollouts/conditioned.py": "ConditionedRollout, the base of the conditioned-rollout strategies",
    "rollouts/side_model.py": "the frozen draft model draft_injection generates with",
    "rollouts/linucb.py": "the LinUCB bandit and context features of intervention_bandit",
    "rollouts/interventions.py": "the hint, critique and draft prompts of intervention_bandit",
    "envs/tags.py": "the tag tool-call protocol (<calc>...</calc>) shared by the environments",
    "envs/episode.py": "the token view of one episode: ids and the trained-token mask",
    "envs/runner.py": "the episode loop shared by training (rollout_func) and held-out eval",
    "envs/sources.py": "a data=mixture run's episodes: each row plays its source's environment (rlpost/data/mixture.py)",
    "envs/search_data.py": "the bundled search corpus and questions (python -m rlpost.envs.search_data)",
    "envs/booking_data.py": "the bundled simulated-user task (python -m rlpost.envs.booking_data)",
    "envs/booking_dialogues.py": "the logged booking dialogues a simulator is aligned to (python -m ...)",
    "envs/scripted_traveller.py": "the scripted traveller: the logs' user and the held-out users of simulated_user",
}
BASE_BUNDLE = "grpo"


def registered() -> list[tuple[str, str, type]]:
    return [(kind, name, cls) for kind, (registry, _, _) in KINDS.items() for name, cls in registry.items()]


def own_node(group: str, option: str) -> dict:
    node = OmegaConf.to_container(OmegaConf.load(CONF / group / f"{option}.yaml"))
    node.pop("defaults", None)
    return node


def names_in_yaml(group: str, option: str) -> tuple[str, ...]:
    """The registered names a conf option configures."""
    node = own_node(group, option)
    if group == "reward":
        return tuple(term["name"] for term in node["terms"])
    if group in ("algorithm/regularizers", "algorithm/grad"):  # list groups: the option's node is {<name>: {...}}
        return tuple(node)
    return (node["name"],)


# ---- the naming rule ---------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "name", "cls"), registered(), ids=lambda v: getattr(v, "__name__", v))
def test_each_registered_component_is_defined_in_its_own_file(kind, name, cls):
    assert cls.__module__ == f"rlpost.{kind}.{name}", (
        f"{kind} {name!r} ({cls.__name__}) is defined in {cls.__module__}; move it to rlpost/{kind}/{name}.py"
    )
    assert cls.registry_name == name


@pytest.mark.parametrize(("kind", "name", "cls"), registered(), ids=lambda v: getattr(v, "__name__", v))
def test_each_registered_component_has_its_yaml(kind, name, cls):
    group = KINDS[kind][2]
    if (kind, name) in NO_YAML:
        assert group is None or not (CONF / group / f"{name}.yaml").exists(), f"{kind} {name}: drop it from NO_YAML"
        return
    path = CONF / group / f"{name}.yaml"
    assert path.exists(), f"{kind} {name!r} has no {path.relative_to(ROOT)} (or list it in NO_YAML with a reason)"
    assert name in names_in_yaml(group, name), f"{path.relative_to(ROOT)} does not configure {kind} {name!r}"


def conf_options() -> list[tuple[str, str]]:
    return [(group, p.stem) for _, _, group in KINDS.values() if group for p in sorted((CONF / group).glob("*.yaml"))]


@pytest.mark.parametrize(("group", "option"), conf_options(), ids=lambda v: v)
def test_each_yaml_names_its_registered_component(group, option):
    kind = next(k for k, (_, _, g) in KINDS.items() if g == group)
    registry = KINDS[kind][0]
    names = names_in_yaml(group, option)
    assert all(n in registry for n in names), f"conf/{group}/{option}.yaml names an unregistered {kind}: {names}"
    if (group, option) in PRESETS:
        assert names == PRESETS[(group, option)][0], f"conf/{group}/{option}.yaml: update PRESETS"
        assert option not in registry, f"{option} is registered now: conf/{group}/{option}.yaml is no preset"
        return
    assert option in names, (
        f"conf/{group}/{option}.yaml configures {names}, not a component registered as {option!r} "
        "(rename it, or list it in PRESETS with a reason)"
    )


def test_every_conf_group_is_a_registry_or_listed():
    groups = {p.parent.relative_to(CONF).as_posix() for p in CONF.rglob("*.yaml")}
    groups -= {".", *(g for g in groups if g.startswith("hydra/") or g.startswith("recipe/"))}
    known = {group for _, _, group in KINDS.values() if group} | set(NOT_A_REGISTRY)
    assert groups <= known, f"conf groups with no registry and no reason: {sorted(groups - known)}"


def test_component_folders_hold_base_and_components_only():
    expected = {f"{kind}/{name}.py" for kind, name, _ in registered()}
    found = {
        path.relative_to(PACKAGE).as_posix()
        for kind in KINDS
        for path in (PACKAGE / kind).glob("*.py")
        if path.name not in ("__init__.py", "base.py")
    }
    stray = sorted(found - expected - set(HELPERS))
    assert not stray, f"modules in component folders that are no registered component: {stray} (or list in HELPERS)"
    missing = sorted(expected - found)
    assert not missing, f"registered components without their file: {missing}"
    gone = sorted(h for h in HELPERS if not (PACKAGE / h).exists())
    assert not gone, f"HELPERS lists modules that no longer exist: {gone}"


def test_the_rule_and_its_exceptions_are_documented():
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "## The naming rule" in text
    for group, option in PRESETS:
        assert f"conf/{group}/{option}.yaml" in text, (group, option)
    for kind, name in NO_YAML:
        assert f"rlpost/{kind}/{name}.py" in text, (kind, name)


# ---- the component contract --------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "name", "cls"), registered(), ids=lambda v: getattr(v, "__name__", v))
def test_each_component_subclasses_its_kind_base_with_one_constructor(kind, name, cls):
    registry, base, _ = KINDS[kind]
    assert registry.base is base and issubclass(cls, base) and issubclass(base, Component)
    assert dataclasses.is_dataclass(cls.Config)
    params = list(inspect.signature(cls.__init__).parameters.values())
    assert [p.name for p in params] == ["self", "cfg"], f"{cls.__name__}.__init__{inspect.signature(cls.__init__)}"
    assert params[1].default is inspect.Parameter.empty, f"{cls.__name__}: cfg has a default"
    assert cls.stateful == (cls.state_dict is not Component.state_dict), cls.__name__


def test_every_base_declares_the_members_build_show_and_the_trainer_call():
    """The optional members with their no-op defaults: calling them on a bare component is safe."""
    for base in (Advantage, PolicyLoss, Regularizer, GradTransform, Correction, RolloutStrategy, Reward, Combine):
        assert base.requires == frozenset() and base.stateful is False
        assert base.sampler is Component.sampler and base.score_rollouts is Component.score_rollouts
        assert base.check_run is Component.check_run and base.describe is Component.describe
    assert Regularizer.prepare(Regularizer(Regularizer.Config()), None) == {}
    assert GradTransform.check_compatible(GradTransform(GradTransform.Config()), None) is None
    strategy = RolloutStrategy(RolloutStrategy.Config())
    assert strategy.adjust_rewards("r", [], [], [], 4) == ("r", {})
    assert Correction.peer is None and Correction.peer_per_group == 0
    reward = REWARDS.get("exact_match")(REWARDS.get("exact_match").Config())
    assert (reward.is_group_reward, reward.group_size, reward.learning, reward.rollout_fields) == (
        False,
        None,
        False,
        (),
    )
    assert reward.__name__ == "exact_match"  # TRL's log name until build_reward_terms sets the term name
    assert REWARDS.get("majority_vote").is_group_reward
    component = Component(Component.Config())
    assert component.sampler(None, generation_batch_prompts=1, num_generations=1, seed=0) is None
    assert component.score_rollouts(None) == {} and component.state_dict() == {}


def test_a_registry_refuses_a_class_outside_its_kind():
    class Stray(Component):
        """Not an advantage."""

    with pytest.raises(RuntimeError, match="must subclass Advantage"):
        ADVANTAGES.register("stray_for_test")(Stray)
    assert "stray_for_test" not in ADVANTAGES


def test_a_stateful_component_must_say_so():
    with pytest.raises(TypeError, match="stateful = True"):

        class Forgot(Advantage):  # noqa: F841 (defining it is the test)
            def state_dict(self):
                return {"x": 1}


# ---- algorithm bundles: a base and what differs ------------------------------------------------
BUNDLES = sorted(p.stem for p in (CONF / "algorithm").glob("*.yaml"))


def bundle_defaults(bundle: str) -> list:
    return OmegaConf.to_container(OmegaConf.load(CONF / "algorithm" / f"{bundle}.yaml")).get("defaults", [])


def composed(overrides: list[str]) -> tuple[dict, dict]:
    """(the composed algorithm node, Hydra's group choices)."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
    return OmegaConf.to_container(cfg.algorithm), dict(cfg.hydra.runtime.choices)


def leaves(node: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in node.items():
        if isinstance(value, dict) and value:
            out |= leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def parent(bundle: str) -> str | None:
    first = bundle_defaults(bundle)[0]
    return first if isinstance(first, str) and first in BUNDLES else None


def test_every_bundle_extends_the_base():
    assert BASE_BUNDLE in BUNDLES and parent(BASE_BUNDLE) is None
    for bundle in sorted(set(BUNDLES) - {BASE_BUNDLE}):
        chain, current = [bundle], bundle
        while (current := parent(current)) is not None:
            chain.append(current)
            assert len(chain) <= len(BUNDLES), chain
        assert chain[-1] == BASE_BUNDLE, f"conf/algorithm/{bundle}.yaml does not extend {BASE_BUNDLE}: {chain}"
        entries = bundle_defaults(bundle)
        assert entries[-1] == "_self_", bundle
        for entry in entries[1:-1]:  # sub-group choices change the base's: `override <group>: <option>`
            assert isinstance(entry, dict) and all(k.startswith("override ") for k in entry), (bundle, entry)


@pytest.mark.parametrize("bundle", sorted(set(BUNDLES) - {BASE_BUNDLE}))
def test_a_bundle_states_only_what_differs_from_its_base(bundle, tmp_path):
    base = parent(bundle)
    replay = ["algorithm.replay=[x]"]  # regen's required value (composition only)
    base_node, base_choices = composed([f"algorithm={base}"])
    node, choices = composed([f"algorithm={bundle}", *(replay if bundle == "regen" else [])])
    own = leaves(own_node("algorithm", bundle))
    base_leaves = leaves(base_node)
    same = sorted(k for k, v in own.items() if k in base_leaves and base_leaves[k] == v and k != "replay")
    assert not same, f"conf/algorithm/{bundle}.yaml restates {same} of {base}"
    for entry in bundle_defaults(bundle)[1:-1]:
        for key, option in entry.items():
            group = f"algorithm/{key.removeprefix('override ').strip()}"
            assert base_choices[group] != option, f"{bundle} overrides {group}={option}, {base}'s own choice"
            assert choices[group] == option
    assert node["name"] == bundle


def test_a_bundle_with_a_swapped_loss_composes():
    node, choices = composed(["algorithm=gepo", "algorithm/loss=output_reset"])
    assert (choices["algorithm/loss"], choices["algorithm/advantage"], node["name"]) == ("output_reset", "gepo", "gepo")
    assert node["loss"] == own_node("algorithm/loss", "output_reset")


def test_helpers_listed_still_import():
    for helper in HELPERS:
        if (PACKAGE / helper).exists():
            importlib.import_module("rlpost." + helper.removesuffix(".py").replace("/", "."))
