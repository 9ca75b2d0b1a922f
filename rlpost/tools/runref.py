"""``run=<run directory>`` for eval and diagnose: the run's checkpoint, data and reward, plus your overrides.

With ``run=DIR`` the ``model`` node becomes the run's checkpoint (``checkpoint=final`` by default;
for a LoRA run, the run's base model plus the adapter), and ``data`` and ``reward`` become the
run's own resolved nodes (``DIR/config.yaml``), and so do its correctness criterion
(``eval.correct_term`` / ``eval.correct_threshold`` become ``correct_term`` / ``correct_threshold``). Command-line choices still win: ``data=jsonl``
(a group choice) replaces the run's data node; dotted overrides (``data.eval_size=20``,
``model.dtype=bfloat16``) are applied on top of the run's node. Choosing ``model=...`` together
with ``run=`` is refused: they name two different models.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from rlpost.core.errors import ConfigError
from rlpost.models.weights import is_adapter, is_run_dir, resolve_checkpoint, run_config

GROUPS = ("data", "reward")
CRITERION = ("correct_term", "correct_threshold")  # eval.<key> of the run -> <key> of eval and diagnose


def parsed(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides(overrides)


def apply_run(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Replace model/data/reward of the composed config ``raw`` by the run's, keeping command-line choices."""
    if not raw.get("run"):
        return raw
    run_dir = Path(str(raw["run"])).expanduser()
    if not is_run_dir(run_dir):
        raise ConfigError(f"run={raw['run']!r} is not an rlpost run directory (no config.yaml and checkpoints/).")
    items = parsed(overrides)
    chosen = {o.key_or_group for o in items if "." not in o.key_or_group}
    if "model" in chosen:
        raise ConfigError("Give either run=<run directory> or model=<choice>, not both: they name two models.")
    saved = run_config(run_dir)
    checkpoint = resolve_checkpoint(run_dir, "run", str(raw.get("checkpoint") or "final"))
    out = copy.deepcopy(raw)
    model = dict(saved["model"])
    if is_adapter(checkpoint):  # a LoRA run saved only its adapter: base model + adapter
        model["lora"] = {"enabled": False}  # the base alone (other LoRA keys would warn)
        out["adapter"] = out.get("adapter") or str(checkpoint)
    else:
        keep = ("dtype", "trust_remote_code", "safetensors_only")
        model = {"source": "hf", "path": str(checkpoint), "name": f"{run_dir.name}/{checkpoint.name}"}
        model.update({k: saved["model"][k] for k in keep if k in saved["model"]})
    out["model"] = model
    for group in GROUPS:
        if group not in chosen and group in saved:
            out[group] = copy.deepcopy(saved[group])
    for key in CRITERION:  # eval/accuracy means what it meant in the run
        if key not in chosen and key in (saved.get("eval") or {}):
            out[key] = saved["eval"][key]
    for o in items:  # dotted overrides on top of the run's nodes
        head, _, rest = o.key_or_group.partition(".")
        if rest and head in ("model", *GROUPS):
            _set(out[head], rest, o.value())
    return out


def _set(node: dict, dotted: str, value: Any) -> None:
    from omegaconf import OmegaConf

    conf = OmegaConf.create(node)
    OmegaConf.update(conf, dotted, value, merge=True, force_add=True)
    node.clear()
    node.update(OmegaConf.to_container(conf, resolve=True))
