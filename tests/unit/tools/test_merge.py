"""rlpost merge: the weight arithmetic by hand, then real tiny-random model folders through the CLI
(bit-exact endpoints, the mean, TIES/task arithmetic on every tensor, LoRA == adapter outputs,
mismatched shapes refused with nothing written, a -m sweep over alpha writing one model per job)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from rlpost import cli
from rlpost.models.loading import ModelConfig, load_model, tiny_random_folder
from rlpost.tools import merge_math


def test_linear_endpoints_are_the_inputs_bit_for_bit_and_half_is_the_mean():
    a = torch.tensor([0.1, -2.5, 3e-8, 7.0])
    b = torch.tensor([1.3, 0.2, -1e-7, -7.0])
    assert torch.equal(merge_math.linear(a, b, 0.0), a)
    assert torch.equal(merge_math.linear(a, b, 1.0), b)
    assert torch.allclose(merge_math.linear(a, b, 0.5), torch.tensor([0.7, -1.15, -3.5e-8, 0.0]))
    # bf16 in, bf16 out; the endpoints stay exact in any dtype
    a16, b16 = a.bfloat16(), b.bfloat16()
    assert (
        torch.equal(merge_math.linear(a16, b16, 1.0), b16) and merge_math.linear(a16, b16, 0.3).dtype == torch.bfloat16
    )


def test_task_arithmetic_by_hand():
    # tau_1 = 1 * ([2,2] - [1,2]) = [1,0]; tau_2 = 0.5 * ([1,5] - [1,2]) = [0,1.5]; base + 2 * [1,1.5] = [3,5]
    base = torch.tensor([1.0, 2.0])
    got = merge_math.task_arithmetic(base, [torch.tensor([2.0, 2.0]), torch.tensor([1.0, 5.0])], [1.0, 0.5], 2.0)
    assert torch.allclose(got, torch.tensor([3.0, 5.0]))


TAUS = torch.tensor(
    [
        [3.0, -1.0, 0.5, 2.0, 0.0],
        [-4.0, 1.0, -0.2, 0.5, 1.5],
        [2.0, 0.1, -3.0, -1.0, 0.2],
    ]
)


def test_ties_trim_elect_disjoint_mean_by_hand():
    # density 0.4 of 5 entries -> keep ceil(2.0) = 2 largest |tau| per task vector:
    #   tau1 -> [3, 0, 0, 2, 0]   tau2 -> [-4, 0, 0, 0, 1.5]   tau3 -> [2, 0, -3, 0, 0]
    assert torch.equal(merge_math.trim(TAUS[0], 0.4), torch.tensor([3.0, 0, 0, 2.0, 0]))
    assert torch.equal(merge_math.trim(TAUS[1], 0.4), torch.tensor([-4.0, 0, 0, 0, 1.5]))
    assert torch.equal(merge_math.trim(TAUS[2], 0.4), torch.tensor([2.0, 0, -3.0, 0, 0]))
    # elected sign of the sums [3-4+2, 0, -3, 2, 1.5] = [+, 0, -, +, +]
    # disjoint mean over the agreeing non-zeros: [(3+2)/2, 0, -3, 2, 1.5]
    merged = merge_math.ties_merge(TAUS, 0.4)
    assert torch.allclose(merged, torch.tensor([2.5, 0.0, -3.0, 2.0, 1.5]))
    # on weights: base 1 + task vectors, scale 0.5 -> 1 + 0.5 * merged
    base = torch.ones(5)
    got = merge_math.ties(base, [base + t for t in TAUS], [1.0, 1.0, 1.0], 0.5, 0.4)
    assert torch.allclose(got, torch.tensor([2.25, 1.0, -0.5, 2.0, 1.75]))


def test_ties_density_one_keeps_all_and_cancelled_signs_give_zero():
    # density 1: no trimming; entry 1: 1 + (-1) = 0 -> elected sign 0 -> merged 0
    taus = torch.tensor([[1.0, 1.0], [3.0, -1.0]])
    assert torch.allclose(merge_math.ties_merge(taus, 1.0), torch.tensor([2.0, 0.0]))


# ---------------------------------------------------------------- real model folders


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Three tiny-random model folders: A (the seeded tiny model), B and C (A plus seeded noise)."""
    root = tmp_path_factory.mktemp("merge")
    source = tiny_random_folder(ModelConfig(source="tiny_random"))
    out = {}
    for name, seed in (("A", None), ("B", 1), ("C", 2)):
        folder = root / name
        shutil.copytree(source, folder)
        if seed is not None:
            g = torch.Generator().manual_seed(seed)
            tensors = load_file(folder / "model.safetensors")
            tensors = {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in tensors.items()}
            save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        out[name] = folder
    return out


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(folder / "model.safetensors")


def test_merge_endpoints_and_mean_through_the_cli(folders, tmp_path):
    a, b = weights(folders["A"]), weights(folders["B"])
    for alpha in (0.0, 1.0, 0.5):
        out = tmp_path / f"alpha{alpha}"
        argv = ["merge", f"models=[{folders['A']},{folders['B']}]", f"alpha={alpha}", f"out={out}"]
        assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'hydra'}"]) == 0
        got = weights(out)
        assert set(got) == set(a)
        for k in a:
            if alpha == 0.0:
                assert torch.equal(got[k], a[k]), k  # bit for bit
            elif alpha == 1.0:
                assert torch.equal(got[k], b[k]), k
            else:
                assert torch.allclose(got[k], (a[k] + b[k]) / 2, atol=1e-7), k
        meta = json.loads((out / "rlpost_merge.json").read_text())
        assert meta["method"] == "linear" and meta["alpha"] == alpha
    # the folder is a normal model: transformers and model=hf load it, with the tokenizer
    model = load_model(ModelConfig(source="hf", path=str(tmp_path / "alpha0.5")))
    assert torch.allclose(
        model.state_dict()["model.norm.weight"], (a["model.norm.weight"] + b["model.norm.weight"]) / 2
    )
    assert (tmp_path / "alpha0.5" / "tokenizer.json").is_file()
    assert not list(tmp_path.glob(".alpha*"))  # no temporary folder left


def test_task_arithmetic_and_ties_on_every_tensor(folders, tmp_path):
    a, b, c = weights(folders["A"]), weights(folders["B"]), weights(folders["C"])
    base_args = ["model=hf", f"model.path={folders['A']}", f"models=[{folders['B']},{folders['C']}]"]
    ta = tmp_path / "ta"
    argv = ["merge", "method=task_arithmetic", *base_args, "weights=[1.0,0.5]", "scale=0.8", f"out={ta}"]
    assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'h1'}"]) == 0
    got = weights(ta)
    for k in a:
        assert torch.allclose(got[k], a[k] + 0.8 * ((b[k] - a[k]) + 0.5 * (c[k] - a[k])), atol=1e-6), k
    ties = tmp_path / "ties"
    argv = ["merge", "method=ties", *base_args, "density=0.3", f"out={ties}"]
    assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'h2'}"]) == 0
    got = weights(ties)
    for k in ("model.layers.0.mlp.up_proj.weight", "model.norm.weight"):
        taus = torch.stack([b[k] - a[k], c[k] - a[k]])
        assert torch.allclose(got[k], a[k] + merge_math.ties_merge(taus, 0.3), atol=1e-6)
        changed = (got[k] != a[k]).float().mean().item()
        assert 0.3 <= changed <= 0.6  # two task vectors at density 0.3 touch between 30% and 60% of entries


def test_mismatched_shapes_are_refused_and_nothing_is_written(folders, tmp_path, capsys):
    other = tiny_random_folder(ModelConfig(source="tiny_random", tiny_intermediate=96))
    out = tmp_path / "never"
    argv = ["merge", f"models=[{folders['A']},{other}]", f"out={out}", f"hydra.run.dir={tmp_path / 'h'}"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "does not match models[0]" in err and "mlp" in err and "[64, 96]" in err
    assert not out.exists() and not (tmp_path / "h").exists()


def test_missing_keys_and_bad_inputs_are_refused(folders, tmp_path, capsys):
    dropped = tmp_path / "dropped"
    shutil.copytree(folders["B"], dropped)
    tensors = weights(dropped)
    tensors.pop("model.norm.weight")
    save_file(tensors, str(dropped / "model.safetensors"), metadata={"format": "pt"})
    cases = [
        ([f"models=[{folders['A']},{dropped}]"], "'model.norm.weight' is missing from models[1]"),
        ([f"models=[{folders['A']}]"], "method=linear interpolates two checkpoints"),
        ([f"models=[{folders['A']},{folders['B']}]", "alpha=1.5"], "alpha=1.5 must be in [0, 1]"),
        (["method=ties", f"models=[{folders['B']}]"], "method=ties needs the base model"),
        (["method=lora"], "method=lora needs adapter="),
        (["method=tiez"], "Valid choices: linear, task_arithmetic, ties, lora"),
        ([f"models=[{tmp_path / 'nope'},{folders['B']}]"], "no such folder"),
    ]
    for args, message in cases:
        assert cli.main(["merge", *args, f"hydra.run.dir={tmp_path / 'h'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "h").exists()


def test_lora_merge_equals_the_adapter_model(tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    base_cfg = ModelConfig(source="tiny_random")
    torch.manual_seed(0)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    peft_model = get_peft_model(load_model(base_cfg), lora)  # random A and B: the adapter changes outputs
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(adapter)
    out = tmp_path / "merged"
    argv = ["merge", "method=lora", "model=tiny-random", f"adapter={adapter}", f"out={out}"]
    assert cli.main([*argv, f"hydra.run.dir={tmp_path / 'h'}"]) == 0
    merged = load_model(ModelConfig(source="hf", path=str(out)))
    reference = PeftModel.from_pretrained(load_model(base_cfg), str(adapter)).eval()
    ids = torch.tensor([[1, 17, 400, 9, 2048, 33]])
    with torch.no_grad():
        want, got = reference(ids).logits, merged.eval()(ids).logits
        plain = load_model(base_cfg).eval()(ids).logits
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(plain, want, atol=1e-3)  # the adapter does change the outputs
    assert not any("lora" in k for k in weights(out))


def test_sweep_over_alpha_writes_one_model_per_job(folders, tmp_path):
    sweep = tmp_path / "sweep"
    argv = ["merge", "-m", f"models=[{folders['A']},{folders['B']}]", "alpha=0,1", f"hydra.sweep.dir={sweep}"]
    assert cli.main(argv) == 0
    assert sorted(p.parent.name for p in sweep.glob("*/model")) == ["0", "1"]
    for job, source in (("0", "A"), ("1", "B")):
        got, want = weights(sweep / job / "model"), weights(folders[source])
        assert all(torch.equal(got[k], want[k]) for k in want)
