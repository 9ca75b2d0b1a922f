"""PRISM (seed 000 #13, rlpost/models/prism.py): the composition math by hand, the composed decoder against each
member's own forward and against transformers' generate, two tiny LoRA runs composed through `rlpost eval`
and merged through `rlpost merge` (a negative weight for the negative policy), and the refusals."""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from rlpost import cli
from rlpost.models.loading import ModelConfig, load_model, load_tokenizer
from rlpost.models.prism import ComposedPolicy, ComposeSettings, compose_logprobs, load_composed, top_p_filter

from support.trainer import TINY


def test_composition_by_hand():
    # base [0, 1, 2]; positives [1, 1, 1] and [0, 3, 0] with weights 1 and 0.5; negative [2, 0, 2], gamma 0.5
    # pos_1 - base = [1, 0, -1]; 0.5 * (pos_2 - base) = 0.5 * [0, 2, -2] = [0, 1, -1]; base + both = [1, 2, 0]
    # neg - base = [2, -1, 0]; minus 0.5 * that = [-1, 0.5, 0] -> [0, 2.5, 0]
    base = torch.tensor([[0.0, 1.0, 2.0]])
    positives = torch.tensor([[[1.0, 1.0, 1.0]], [[0.0, 3.0, 0.0]]])  # [K=2, B=1, V=3]
    negative = torch.tensor([[2.0, 0.0, 2.0]])
    got = compose_logprobs(base, positives, torch.tensor([1.0, 0.5]), negative, 0.5)
    assert torch.allclose(got, torch.tensor([[0.0, 2.5, 0.0]]))
    # no negative: [1, 2, 0]; one positive at weight 1 is that positive; weight 0 is the base
    assert torch.allclose(
        compose_logprobs(base, positives, torch.tensor([1.0, 0.5]), None, 0.5), torch.tensor([[1.0, 2, 0]])
    )
    assert torch.equal(compose_logprobs(base, positives[:1], torch.tensor([1.0]), None, 0.0), positives[0])
    assert torch.equal(compose_logprobs(base, positives[:1], torch.tensor([0.0]), None, 0.0), base)


def test_logits_or_logprobs_compose_to_the_same_distribution():
    # log_softmax shifts each member's row by a constant c_m; the composition shifts by
    # c_base (1 - sum w + gamma) + sum w_j c_j - gamma c_neg: one constant per row, so softmax is unchanged
    g = torch.Generator().manual_seed(0)
    base, neg = torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g)
    pos = torch.randn(3, 2, 5, generator=g)
    w = torch.tensor([0.7, -0.2, 1.5])
    raw = compose_logprobs(base, pos, w, neg, 0.3)
    logp = compose_logprobs(base.log_softmax(-1), pos.log_softmax(-1), w, neg.log_softmax(-1), 0.3)
    assert torch.allclose(raw.softmax(-1), logp.softmax(-1), atol=1e-6)
    # and p ∝ p_base^(1 - sum w + gamma) prod p_j^w_j p_neg^-gamma: exponent of p_base = 1 - 2.0 + 0.3 = -0.7
    lp = [t.log_softmax(-1) for t in (base, *pos, neg)]
    product = -0.7 * lp[0] + 0.7 * lp[1] - 0.2 * lp[2] + 1.5 * lp[3] - 0.3 * lp[4]
    assert torch.allclose(product.softmax(-1), logp.softmax(-1), atol=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    scores = torch.tensor([[0.5, 0.3, 0.2]]).log()
    # mass before each token (sorted): 0, 0.5, 0.8 -> top_p 0.7 drops the third (0.8 >= 0.7)
    assert torch.isinf(top_p_filter(scores, 0.7)).tolist() == [[False, False, True]]
    # top_p 0.5: the mass before the second token is already 0.5 -> only the first stays
    assert torch.isinf(top_p_filter(scores, 0.5)).tolist() == [[False, True, True]]
    assert torch.equal(top_p_filter(scores, 1.0), scores)


# ---------------------------------------------------------------- real tiny-random adapters


@pytest.fixture(scope="module")
def adapters(tmp_path_factory):
    """Two random LoRA adapters over the tiny model (random A and B: each changes the outputs)."""
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("prism")
    folders = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(load_model(ModelConfig(source="tiny_random")), lora).save_pretrained(root / str(seed))
        folders.append(root / str(seed))
    return folders


def composed(folders, weights, negative, gamma) -> ComposedPolicy:
    c = ComposeSettings(positives=[str(f) for f in folders], weights=weights, negative=negative, gamma=gamma)
    paths = [*folders, *([negative] if negative else [])]
    tokenizer = load_tokenizer(ModelConfig(source="tiny_random"))
    return load_composed(load_model(ModelConfig(source="tiny_random")), paths, c, tokenizer.eos_token_id)


def member_logprobs(folder, ids, mask):
    from peft import PeftModel

    model = load_model(ModelConfig(source="tiny_random")).eval()
    if folder is not None:
        model = PeftModel.from_pretrained(model, str(folder)).eval()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, position_ids=positions).logits[:, -1].log_softmax(-1)


PROMPTS = torch.tensor([[0, 0, 17, 400, 9], [1, 33, 2048, 5, 12]])  # row 0 left-padded with 2 pad tokens
MASK = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])


def test_first_composed_token_is_the_argmax_of_the_hand_formula(adapters):
    a, b = adapters
    policy = composed([a, b], [1.0, 0.5], b, 0.5)
    out = policy.generate(PROMPTS, MASK, max_new_tokens=1, pad_token_id=0)
    base, za, zb = (member_logprobs(f, PROMPTS, MASK) for f in (None, a, b))
    # z = base + 1 (za - base) + 0.5 (zb - base) - 0.5 (zb - base) = za: the negative cancels the second positive
    z = base + (za - base) + 0.5 * (zb - base) - 0.5 * (zb - base)
    assert torch.allclose(z, za, atol=1e-6)
    assert out[:, -1].tolist() == za.argmax(-1).tolist() and out.shape == (2, 6)
    assert not torch.equal(base.argmax(-1), za.argmax(-1)) or not torch.allclose(base, za, atol=1e-3)


def test_composed_greedy_decoding_matches_generate_of_the_member_it_reduces_to(adapters):
    from peft import PeftModel

    a, b = adapters
    tok = load_tokenizer(ModelConfig(source="tiny_random"))
    reference = PeftModel.from_pretrained(load_model(ModelConfig(source="tiny_random")), str(a)).eval()
    want = reference.generate(input_ids=PROMPTS, attention_mask=MASK, max_new_tokens=6, do_sample=False,
                              pad_token_id=tok.pad_token_id)  # fmt: skip
    got = composed([a, b], [1.0, 0.0], None, 0.0).generate(
        PROMPTS, MASK, max_new_tokens=6, pad_token_id=tok.pad_token_id
    )
    assert got.tolist() == want[:, : got.size(1)].tolist()
    adapted = want
    # weights 0 everywhere: the base model's own greedy continuation
    plain = load_model(ModelConfig(source="tiny_random")).eval()
    want = plain.generate(input_ids=PROMPTS, attention_mask=MASK, max_new_tokens=6, do_sample=False,
                          pad_token_id=tok.pad_token_id)  # fmt: skip
    got = composed([a, b], [0.0, 0.0], None, 0.0).generate(
        PROMPTS, MASK, max_new_tokens=6, pad_token_id=tok.pad_token_id
    )
    assert got.tolist() == want[:, : got.size(1)].tolist()
    assert adapted.tolist() != want.tolist()  # the adapter does change the greedy continuation
    # sampling: n = 3 per prompt, prompt-major, every row starts with its prompt
    torch.manual_seed(0)
    sampled = composed([a, b], [0.5, 0.5], b, 0.2).generate(
        PROMPTS, MASK, max_new_tokens=4, pad_token_id=0, num_return_sequences=3, do_sample=True, top_p=0.9
    )
    assert sampled.shape[0] == 6 and sampled[:3, :5].tolist() == [PROMPTS[0].tolist()] * 3


# ---------------------------------------------------------------- two tiny LoRA runs, eval and merge


def lora_run(tmp_path, name: str, seed: int):
    run_dir = tmp_path / name
    hash_reward = "reward.terms=[{name: callable, weight: 1.0, params: {path: 'support.rewards:text_hash_reward'}}]"
    argv = ["train", *TINY, hash_reward, "train.steps=1", "model.lora.enabled=true", "model.lora.r=4", f"seed={seed}"]
    assert cli.main([*argv, "train.learning_rate=0.1", "eval.at_start=false", "eval.at_end=false",
                     f"hydra.run.dir={run_dir}"]) == 0  # fmt: skip
    return run_dir


def test_two_lora_runs_composed_by_eval_and_merged_with_a_negative_weight(tmp_path, capsys):
    a, b = lora_run(tmp_path, "pos", 0), lora_run(tmp_path, "neg", 1)
    out = tmp_path / "eval.json"
    argv = ["eval", "model=tiny-random", f"compose.positives=[{a}]", f"compose.negative={b}", "compose.gamma=0.5",
            "size=4", "max_new_tokens=4", "progress=false", "batch_size=2", f"out={out}", f"hydra.run.dir={tmp_path / 'e'}"]  # fmt: skip
    assert cli.main(argv) == 0
    record = json.loads(out.read_text())
    assert record["compose"] == {"positives": [str(a)], "weights": None, "negative": str(b), "gamma": 0.5}
    assert record["results"]["eval/num_prompts"] == 4 and math.isfinite(record["results"]["eval/reward"])
    # weight space: base + 1 * (A - base) - 0.5 * (B - base), each adapter merged into the base first
    merged = tmp_path / "merged"
    argv = ["merge", "method=task_arithmetic", "model=tiny-random", f"models=[{a},{b}]", "weights=[1.0,-0.5]",
            f"out={merged}", f"hydra.run.dir={tmp_path / 'm'}"]  # fmt: skip
    assert cli.main(argv) == 0
    singles = {}
    for name, run in (("a", a), ("b", b)):
        folder = tmp_path / f"single_{name}"
        argv = ["merge", "method=lora", f"adapter={run}", f"out={folder}", f"hydra.run.dir={tmp_path / ('s' + name)}"]
        assert cli.main(argv) == 0
        singles[name] = load_file(folder / "model.safetensors")
    got = load_file(merged / "model.safetensors")
    base = load_model(ModelConfig(source="tiny_random")).state_dict()
    key = "model.layers.0.self_attn.q_proj.weight"  # an adapted weight: both runs moved it
    assert not torch.allclose(singles["a"][key], base[key], atol=1e-4)
    want = base[key] + (singles["a"][key] - base[key]) - 0.5 * (singles["b"][key] - base[key])
    assert torch.allclose(got[key], want, atol=1e-6)
    assert not (merged / ".adapters").exists() and json.loads((merged / "rlpost_merge.json").read_text())[
        "weights"
    ] == [1.0, -0.5]
    # refusals, before any model loads
    cases = [
        ([f"compose.positives=[{a}]", "compose.weights=[1,2]"], "compose.weights has 2 entries but compose.positives has 1"),
        ([f"compose.positives=[{a}]", "compose.gamma=-1"], "compose.gamma=-1"),
        ([f"compose.negative={b}"], "compose.negative and compose.weights need compose.positives"),
        ([f"compose.positives=[{tmp_path / 'merged'}]"], "has no adapter_config.json (PRISM composes LoRA adapters)"),
        ([f"compose.positives=[{a}]", f"adapter={a}"], "compose.positives and adapter="),
        ([f"compose.positives=[{a}]", "model=hf", f"model.path={tmp_path / 'merged'}"], "was trained on model source=tiny_random"),
    ]  # fmt: skip
    for args, message in cases:
        model = [] if any(x.startswith("model=") for x in args) else ["model=tiny-random"]
        assert cli.main(["eval", *model, *args, f"hydra.run.dir={tmp_path / 'x'}"]) == 2, args
        assert message in capsys.readouterr().err, args
    argv = ["merge", f"models=[{a},{b}]", f"hydra.run.dir={tmp_path / 'x'}"]
    assert cli.main(argv) == 2 and "or give method=task_arithmetic or ties" in capsys.readouterr().err
