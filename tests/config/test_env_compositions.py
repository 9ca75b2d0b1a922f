"""Every algorithm option with episodes (``data/env=calculator reward=env``): it builds, or it is refused before
any model loads with the reason. The refusals of episodes themselves are listed here, so a change is deliberate;
an option that needs a reward term the env reward lacks fails naming that term."""

from __future__ import annotations

import re

import pytest

from rlpost.app import compose
from rlpost.build import build_run
from rlpost.core.errors import ConfigError

from support.config import stand_in_replay
from support.paths import REPO

CONF = REPO / "conf"
GROUPS = ["algorithm", "algorithm/advantage", "algorithm/loss", "algorithm/correction", "algorithm/rollout",
          "algorithm/safety", "algorithm/regularizers", "algorithm/grad", "reward/combine"]  # fmt: skip
EPISODES = ["data/env=calculator", "reward=env"]
REFUSED_BY_EPISODES = {  # option -> the key episodes name in the refusal (rlpost/envs/base.py)
    **{f"algorithm/correction={c}": "algorithm/correction" for c in ("acrl", "ais", "f_tis", "mis", "tis")},
    **{
        f"algorithm/rollout={r}": "algorithm/rollout"
        for r in (
            "draft_injection",
            "feedback_refine",
            "forced_refusal",
            "generic_negative",
            "intervention_bandit",
            "language_routed",
            "rubric_guidance",
            "self_critique",
            "struct_refine",
        )
    },  # fmt: skip
    "algorithm=dapo": "algorithm.overlong.soft_penalty",
    "algorithm=ppo": "algorithm.critic (PPO)",
    "algorithm=ppo_or": "algorithm.critic (PPO)",
}
NEEDS_OTHER_TERMS = {  # options that read reward terms by name: refused naming the missing term
    "algorithm/advantage=routed": "format",
    "algorithm/advantage=segments": "math_answer",
    "algorithm/advantage=tiar": "ternary_abstention",
    "reward/combine=decoupled": "format",
    "algorithm/rollout=frost": "infill_likelihood",  # its check names the term before the episode refusal
    "algorithm/rollout=experience_buffer": "runs on data/env=frozen_worker or without an environment",  # not calculator
    "algorithm/advantage=gae": "needs a critic",
    "algorithm/advantage=dpo": "gives DPO's gradient only through algorithm/loss=clip",  # without algorithm=ed_idpo
}
GROUP_SIZE = {"algorithm/rollout=self_critique": ["train.num_generations=6", "train.completions_per_step=12"]}  # 2k + 1
SKIPPED = {"algorithm=regen": "needs replay folders: test_regen_with_episodes_is_refused"}
# OPD's default teacher (Qwen2.5-Coder-0.5B) needs `make qwen`, which a fresh CI machine lacks
OFFLINE_TEACHER = {
    "algorithm=opd": ["algorithm.loss.teacher_model=smollm2-135m"],
    "algorithm/loss=opd": ["algorithm.loss.teacher_model=smollm2-135m"],
}


def choices() -> list[str]:
    out = []
    for group in GROUPS:
        for path in sorted((CONF / group).glob("*.yaml")):
            option = f"[{path.stem}]" if group == "algorithm/regularizers" else path.stem
            if f"{group}={path.stem}" not in SKIPPED:
                out.append(f"{group}={option}")
    return out


@pytest.mark.parametrize("choice", choices())
def test_every_option_with_episodes_builds_or_is_refused_with_the_reason(choice):
    key = choice.replace("[", "").replace("]", "")
    cfg = compose([*EPISODES, choice, *OFFLINE_TEACHER.get(key, []), *GROUP_SIZE.get(key, [])])
    if key in REFUSED_BY_EPISODES:
        with pytest.raises(
            ConfigError, match=re.escape(f"data/env=calculator cannot be combined with {REFUSED_BY_EPISODES[key]}:")
        ):
            build_run(cfg)
    elif key in NEEDS_OTHER_TERMS:
        with pytest.raises(ConfigError, match=NEEDS_OTHER_TERMS[key]):
            build_run(cfg)
    else:
        run = build_run(cfg)
        assert run.env is not None and run.env.registry_name == "calculator"


def test_regen_with_episodes_is_refused(tmp_path):
    stand_in_replay(tmp_path / "replay")
    cfg = compose([*EPISODES, "algorithm=regen", f"algorithm.replay=['{tmp_path / 'replay'}']"])
    with pytest.raises(ConfigError, match=r"data/env=calculator cannot be combined with algorithm.replay \(REGEN\)"):
        build_run(cfg)
