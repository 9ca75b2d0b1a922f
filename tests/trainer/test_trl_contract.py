"""The TRL contract: every private TRL / transformers member rlpost overrides or reads, pinned.

rlpost's trainer (rlpost/trainer/, rlpost/algorithms/) overrides private methods of
``trl.GRPOTrainer`` and reads private attributes of it. Those are not a stable API: an upgrade may
rename a parameter, drop a method or move an attribute without notice. This test fails in CI, naming
the seam, instead of letting a run go subtly wrong:

- every private method an rlpost trainer class overrides is listed in ``SEAMS`` with the parameter
  names rlpost relies on, and TRL's method has exactly those parameters (in order);
- every attribute the trainer code reads from TRL (found by reading the source: ``self.<name>`` /
  ``trainer.<name>`` that rlpost never assigns) exists on a real GRPOTrainer;
- TRL's private state rlpost writes (``CheckpointSeams.TRL_STATE`` in rlpost/trainer/checkpoints.py) exists on a
  real GRPOTrainer and
  is what TRL's ``_prepare_inputs`` reads;
- every trainer class a bundle can pick (``rlpost.algorithms.TRAINERS``) is checked;
- the keys of TRL's loss batch (the output of ``_generate_and_score_completions``) are the ones
  rlpost/losses/base.py declares, and the loss seam refuses a key that neither TRL nor rlpost declares;
- the pinned versions are the ones installed.

The torch / transformers internals of rlpost's run-time patches are pinned in test_internals_contract.py.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import transformers
import trl
from trl import GRPOTrainer

from rlpost.algorithms import TRAINERS
from rlpost.algorithms.ppo import PPOTrainer
from rlpost.algorithms.regen import RegenTrainer
from rlpost.algorithms.ug_ttt import UGTTTTrainer
from rlpost.core.component import Component
from rlpost.losses.base import LOSS_BATCH_KEYS, TRL_LOSS_BATCH_KEYS, undeclared_keys
from rlpost.trainer import RLPostTrainer
from rlpost.trainer.checkpoints import CheckpointSeams
from rlpost.trainer.loss import LossSeams

from support.paths import REPO

ROOT = REPO
TRAINER_SOURCES = [*sorted((ROOT / "rlpost" / "trainer").glob("*.py")), *(ROOT / "rlpost" / "algorithms").glob("*.py")]
TRAINER_SOURCES += [  # modules handed the trainer object: they read its public TRL attributes
    ROOT / "rlpost" / "runs" / "replay.py",
    ROOT / "rlpost" / "runs" / "checkpoints.py",
    ROOT / "rlpost" / "safety" / "kit.py",
]
TRAINER_SOURCES += [*(ROOT / "rlpost" / "rollouts").glob("*.py")]  # strategies: none may read the trainer (issue 47)

# the seam -> the parameter names rlpost's override relies on (TRL 1.16.0 / transformers 5.2x)
SEAMS = {
    "_get_train_sampler": ["self", "dataset"],  # stage 0 (trainer/core.py)
    "_generate": ["self", "prompts"],  # stage 1c (trainer/core.py, algorithms/regen.py)
    "_calculate_rewards": ["self", "inputs", "prompts", "completions", "completion_ids_list"],  # stage 2
    "_generate_and_score_completions": ["self", "inputs"],  # stage 3 (trainer/scoring.py, ppo, regen)
    "_compute_loss": ["self", "model", "inputs"],  # stage 5 (trainer/loss.py, ppo)
    "_clip_grad_norm": ["self", "model"],  # stage 6 (trainer/loss.py, ppo)
    "_save_checkpoint": ["self", "model", "trial"],  # stage 7 (trainer/checkpoints.py)
    "_get_output_dir": ["self", "trial"],  # stage 7: where TRL writes a checkpoint
    "_load_optimizer_and_scheduler": ["self", "checkpoint"],  # stage 7: component state on resume (+ ppo)
    "_generate_single_turn": [  # stage 1b (trainer/rollouts.py)
        "self",
        "prompt_ids",
        "images",
        "multimodal_fields",
        "num_generations",
        "has_tool_images",
    ],
    "_get_per_token_logps_and_entropies": [  # stage 4 (trainer/logprobs.py, ppo): the first six are used
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
        "batch_size",
        "compute_entropy",
        "compute_aux_loss",
        "pixel_values",
        "image_grid_thw",
        "num_images",
        "pixel_attention_mask",
        "spatial_shapes",
        "num_tiles",
        "image_sizes",
        "token_type_ids",
        "mm_token_type_ids",
        "image_position_ids",
    ],
    "_save": ["self", "output_dir", "state_dict"],  # PPO's critic next to the weights (algorithms/ppo.py)
}
PUBLIC_OVERRIDES = {  # public Trainer methods rlpost overrides, also pinned
    "create_optimizer": ["self", "model"],
    "compute_loss": ["self", "model", "inputs", "return_outputs", "num_items_in_batch"],
}
RLPOST_CLASSES = (RLPostTrainer, PPOTrainer, RegenTrainer, UGTTTTrainer)


def overridden(cls: type) -> set[str]:
    """Methods of GRPOTrainer (or its bases) that an rlpost class in ``cls``'s MRO defines."""
    names = set()
    for klass in cls.__mro__:
        if klass.__module__.startswith("rlpost"):
            names |= {n for n, v in vars(klass).items() if callable(v) and hasattr(GRPOTrainer, n)}
    return {n for n in names if not (n.startswith("__") and n.endswith("__"))}


def test_pinned_versions():
    assert trl.__version__ == "1.16.0", "rlpost's seams are written against trl 1.16.0 (pyproject pins it)"
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    assert (major, minor) >= (5, 17) and (major, minor) < (5, 25), transformers.__version__


def test_every_trainer_class_is_checked():
    """A trainer class added to rlpost.algorithms.TRAINERS must be added to RLPOST_CLASSES too."""
    classes = {key: path.split(":") for key, path in TRAINERS.items()}
    classes = {key: getattr(importlib.import_module(module), name) for key, (module, name) in classes.items()}
    missed = sorted(key for key, cls in classes.items() if cls not in RLPOST_CLASSES)
    assert not missed, f"trainer classes of rlpost.algorithms.TRAINERS not in RLPOST_CLASSES: {missed}"


@pytest.mark.parametrize("cls", RLPOST_CLASSES, ids=lambda c: c.__name__)
def test_every_override_is_a_listed_seam(cls):
    unlisted = sorted(overridden(cls) - set(SEAMS) - set(PUBLIC_OVERRIDES))
    assert not unlisted, f"{cls.__name__} overrides TRL methods that are not in SEAMS: {unlisted} (add and pin them)"


@pytest.mark.parametrize("name", sorted({**SEAMS, **PUBLIC_OVERRIDES}))
def test_trl_signature_of_each_seam(name):
    expected = {**SEAMS, **PUBLIC_OVERRIDES}[name]
    method = getattr(GRPOTrainer, name, None)
    assert method is not None, f"seam {name}: trl.GRPOTrainer no longer has it (trl {trl.__version__})"
    got = list(inspect.signature(method).parameters)
    assert got == expected, f"seam {name}: TRL's parameters changed from {expected} to {got}"


def read_attributes(path: Path) -> tuple[set[str], set[str]]:
    """``self.X`` / ``trainer.X`` reads in one source file, and the names that file assigns or defines."""
    reads, assigned = set(), set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in ("self", "trainer"):
                (assigned if isinstance(node.ctx, ast.Store) else reads).add(node.attr)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            assigned.add(node.name)
        if isinstance(node, ast.ClassDef):
            assigned |= {t.id for stmt in node.body if isinstance(stmt, ast.AnnAssign | ast.Assign)
                         for t in ([stmt.target] if isinstance(stmt, ast.AnnAssign) else stmt.targets)
                         if isinstance(t, ast.Name)}  # fmt: skip
    return reads, assigned


def trl_reads() -> set[str]:
    """Attributes read from the trainer that neither rlpost's trainer classes nor the reading file define.

    A name a component folder assigns (a side model's own ``self._tokenizer``, ConditionedRollout's
    ``attempt``) is that folder's own; a name rlpost's trainer package assigns is rlpost's everywhere.
    """
    per_file = {path: read_attributes(path) for path in TRAINER_SOURCES}
    folder_assigned: dict[Path, set[str]] = {}
    for path, (_, own) in per_file.items():
        folder_assigned.setdefault(path.parent, set()).update(own)
    trainer_files = [p for p in per_file if p.parent.name in ("trainer", "algorithms")]
    trainer_assigned = set().union(*(per_file[p][1] for p in trainer_files))
    trainer_assigned |= set(dir(RLPostTrainer)) - set(dir(GRPOTrainer))
    return {
        name
        for path, (reads, _) in per_file.items()
        for name in reads - folder_assigned[path.parent] - trainer_assigned
    }


@pytest.fixture(scope="module")
def plain_trainer(tmp_path_factory):
    """A real GRPOTrainer on the tiny model: the object whose attributes rlpost reads."""
    from support.trainer import make_run, train_plain_trl

    run = make_run(["train.steps=1"])
    return train_plain_trl(run, tmp_path_factory.mktemp("plain"))


def test_every_attribute_rlpost_reads_exists_on_trl(plain_trainer):
    from_trl = sorted(trl_reads())
    # rlpost's own objects also appear as self.X in the component sources (cfg, run, critic, ...): only names
    # that TRL's trainer or rlpost's trainer define are TRL's contract; the rest are rlpost's own classes.
    rlpost_only = {"cfg", "run", "critic", "critic_cfg", "regen", "safety", "batch", "replay", "sample_sink"}
    rlpost_only |= set(dir(Component))  # a rollout strategy's own members (registry_name, describe, ...)
    missing = [n for n in from_trl if n not in rlpost_only and not hasattr(plain_trainer, n)]
    trl_private = [n for n in from_trl if n.startswith("_") and hasattr(plain_trainer, n)]
    assert not missing, f"rlpost reads these trainer attributes that trl {trl.__version__} does not have: {missing}"
    assert "_metrics" in trl_private and "_tokenizer" in trl_private  # the contract covers TRL's private state


def test_trl_state_rlpost_writes(plain_trainer):
    """The checkpoint seam (rlpost/trainer/checkpoints.py) saves and restores TRL's micro-step counter and buffered
    generation batch (``TRL_STATE``): they exist on a real GRPOTrainer with those types, TRL's ``_prepare_inputs``
    reads both (so restoring them decides what a resumed run trains on), and the seam's accessors touch no other
    private state."""
    trl_state = CheckpointSeams.TRL_STATE
    missing = [name for name in trl_state if name not in vars(plain_trainer)]
    assert not missing, f"trl {trl.__version__}'s GRPOTrainer no longer has {missing}"
    assert isinstance(plain_trainer._step, int) and plain_trainer._step > 0
    assert plain_trainer._buffered_inputs is None or isinstance(plain_trainer._buffered_inputs, list)
    tree = ast.parse(inspect.getsource(GRPOTrainer._prepare_inputs).strip().replace("\n    ", "\n"))
    read = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and n.value.id == "self" and isinstance(n.ctx, ast.Load)}  # fmt: skip
    assert set(trl_state) <= read, f"GRPOTrainer._prepare_inputs no longer reads {set(trl_state) - read}"
    accessors = [CheckpointSeams.generation_buffer, CheckpointSeams.restore_generation_buffer]
    private = {n.attr for f in accessors for n in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(f))))
               if isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__")}  # fmt: skip
    assert private == set(trl_state), (
        f"the checkpoint seam uses TRL's private {sorted(private)}; TRL_STATE lists {trl_state}"
    )


def trl_output_keys() -> set[str]:
    """The keys ``GRPOTrainer._generate_and_score_completions`` puts into its output dict (read from its source)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(GRPOTrainer._generate_and_score_completions)))
    keys = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            if any(isinstance(t, ast.Name) and t.id == "output" for t in node.targets):
                keys |= {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id == "output" and isinstance(node.slice, ast.Constant):
                keys.add(node.slice.value)
    return keys


def test_trl_loss_batch_keys_are_the_declared_ones():
    assert trl_output_keys() == set(TRL_LOSS_BATCH_KEYS), "TRL's loss batch changed: update TRL_LOSS_BATCH_KEYS"
    assert not set(LOSS_BATCH_KEYS) & TRL_LOSS_BATCH_KEYS  # rlpost's keys never shadow TRL's
    assert all(key.startswith(("rlpost_", "air_")) for key in LOSS_BATCH_KEYS)


def test_the_loss_seam_refuses_a_key_nobody_declared():
    # the trainer only adds declared keys: a component (score_rollouts, prepare) or a trainer subclass that puts
    # any other key into the loss batch fails at its first loss, before any forward
    declared = {"prompt_ids": None, "completion_ids": None, "rlpost_keep": None, "rlpost_teacher_logps": None}
    assert undeclared_keys(declared) == []
    with pytest.raises(RuntimeError, match=r"keys nobody declared: \['rlpost_new_thing'\].*LOSS_BATCH_KEYS"):
        LossSeams._compute_loss(SimpleNamespace(), None, {**declared, "rlpost_new_thing": None})
