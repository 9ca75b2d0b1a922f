"""The internals contract: every torch / transformers internal rlpost's run-time patches rely on, pinned.

rlpost/generation/ and rlpost/logprobs/ are the only places that patch torch or transformers at run time, and
they rely on more than public API: a private oneDNN op, PyTorch's C++ generator and distribution helpers,
the submodules and config fields of Llama / Qwen2 decoder layers, the members of transformers' ``DynamicLayer``,
the keywords ``generate`` passes to a decode step, the global attention registries. Each patching module
declares what it relies on in one place (module-level ``PATCHES``, ``OPS``, ``CPP_INTERNALS``, ``MODEL_PARTS``,
``LAYER_PARTS``, ``CONFIG_FIELDS``, ``OVERRIDDEN``, ...), and this test fails in CI, naming what moved:

- each declaration against the installed libraries: patched attributes and their signatures, op schemas,
  C++ headers and declarations, the parts the fused decoder reads on a tiny LlamaForCausalLM and
  Qwen2ForCausalLM (and decode_layer.cpp's math, written in torch, against HF's forward), DynamicLayer's
  members and their parameters, the attention registries and the call transformers makes to an attention
  function, and the decode steps of a real ``generate`` (each taken by the fused step);
- the code against its declarations: every patch, every ``torch.ops`` op, every ATen/c10 name of the C++
  sources, every private name and every transformers attribute the patching modules use is declared
  (an AST scan), and no module outside rlpost/generation/ and rlpost/logprobs/ patches a library at all.

TRL's private trainer state (``_step`` / ``_buffered_inputs``) and the trainer seams are in test_trl_contract.py.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from functools import partial, wraps
from operator import attrgetter
from pathlib import Path

import pytest
import torch
import transformers
from torch.utils.cpp_extension import include_paths
from transformers import DynamicCache, GenerationConfig, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.cache_utils import DynamicLayer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from rlpost.generation import fused_decode, kv_cache, onednn, parallel_sampling, prefix_generation, skinny_matmul
from rlpost.generation.kv_cache import PreallocatedCache, PreallocatedLayer, preallocated_generation
from rlpost.logprobs import packing, segment_attention

from support.paths import REPO

PACKAGE = REPO / "rlpost"
PATCHING = (PACKAGE / "generation", PACKAGE / "logprobs")  # the only folders allowed to patch a library
LIBRARIES = ("torch", "transformers", "trl", "peft", "accelerate")
# the module-level constants a module declares its reliance with (each is pinned by a test below)
DECLARATIONS = (
    "PATCHES", "OPS", "CPP_INTERNALS", "SUPPORTED", "MODEL_PARTS", "LINEARS", "LAYER_PARTS", "CONFIG_FIELDS",
    "HONOURED", "OVERRIDDEN", "INHERITED", "LAYER_STATE", "CACHE_MEMBERS", "GENERATION_SETTINGS",
    "GENERATE_KEYWORDS", "PREFILL_KEYWORDS", "REGISTRIES", "CALLED_WITH", "OTHER_KEYWORDS",
)  # fmt: skip


def sources(*folders: Path) -> list[Path]:
    return sorted(path for folder in folders for path in folder.rglob("*.py"))


def module_of(path: Path):
    return importlib.import_module(".".join(path.relative_to(REPO).with_suffix("").parts))


def declared(module) -> dict[str, object]:
    return {name: getattr(module, name) for name in DECLARATIONS if hasattr(module, name)}


def identifiers(value) -> set[str]:
    """The names in a declaration: each dotted / ``::`` part of its strings, a dict's keys and its collection values."""
    if isinstance(value, str):
        return set(re.findall(r"[A-Za-z_]\w*", value))
    if isinstance(value, dict):
        found = set().union(*map(identifiers, value)) if value else set()
        return found.union(*(identifiers(v) for v in value.values() if not isinstance(v, str)))
    if isinstance(value, tuple | list | set | frozenset):
        return set().union(*map(identifiers, value)) if value else set()
    return set()


# --- what the code does: patches, ops and names, read from the source ------------------------------------------


def library_aliases(tree: ast.Module) -> dict[str, str]:
    """Names a module binds to a library object -> that object's dotted path (``F`` -> ``torch.nn.functional``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in LIBRARIES:
                    aliases[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0]
                    )
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in LIBRARIES:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """``a.b.c`` with its root resolved through ``aliases``; None when the root is not a library name."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id in aliases:
        return ".".join([aliases[node.id], *reversed(parts)])
    return None


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def patches(path: Path) -> list[tuple[int, str, str]]:
    """Each patch in a source file: (line, what, the attribute). A patch is an assignment or deletion of an
    attribute of a library object (``torch.multinomial = ...``), of any ``.forward`` / ``.generate``, or of a
    private attribute of anything but ``self`` / ``cls`` (``config._attn_implementation``); ``setattr`` too."""
    tree = ast.parse(path.read_text())
    aliases = library_aliases(tree)
    found = []

    def check(line: int, target: ast.expr | None, obj: ast.expr, attr: str) -> None:
        library = dotted(target, aliases) if target is not None else dotted(obj, aliases)
        owner_is_self = isinstance(obj, ast.Name) and obj.id in ("self", "cls")
        if library or attr in ("forward", "generate") or (is_private(attr) and not owner_is_self):
            found.append((line, library or f"{ast.unparse(obj)}.{attr}", attr))

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(item, ast.Attribute):
                    check(node.lineno, item, item.value, item.attr)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            obj, name = node.args[0], node.args[1] if len(node.args) > 1 else None
            attr = name.value if isinstance(name, ast.Constant) and isinstance(name.value, str) else "?"
            if not (isinstance(obj, ast.Name) and obj.id in ("self", "cls")):
                check(node.lineno, None, obj, attr)
    return found


def used_ops(path: Path) -> set[str]:
    """``ns::op`` of every ``torch.ops.<ns>.<op>`` (or ``hasattr/getattr(torch.ops.<ns>, "<op>")``) in a file."""
    tree = ast.parse(path.read_text())
    aliases, ops = library_aliases(tree), set()
    for node in ast.walk(tree):
        name = dotted(node, aliases) if isinstance(node, ast.Attribute) else None
        if name and name.startswith("torch.ops.") and len(name.split(".")) >= 4:
            ops.add("::".join(name.split(".")[2:4]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("hasattr", "getattr"):
            owner = dotted(node.args[0], aliases) if node.args else None
            if owner and owner.startswith("torch.ops.") and isinstance(node.args[1], ast.Constant):
                ops.add(f"{owner.split('.')[2]}::{node.args[1].value}")
    return ops


def attribute_names(path: Path) -> dict[str, int]:
    """Every attribute name a file reads or writes (``x.name``, ``getattr(x, "name")``) -> its first line; not those
    of a module-level object of its own or of a module it imports that is not a library (``_ACTIVE.get``,
    ``functools.cache``)."""
    tree = ast.parse(path.read_text())
    aliases = library_aliases(tree)
    skipped = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    skipped |= {
        (alias.asname or alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.split(".")[0] not in LIBRARIES
    }
    names: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if not (isinstance(root, ast.Name) and root.id in skipped and root.id not in aliases):
                names.setdefault(node.attr, node.lineno)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) >= 2:
            if node.func.id in ("getattr", "hasattr", "setattr", "delattr") and isinstance(node.args[1], ast.Constant):
                names.setdefault(str(node.args[1].value), node.lineno)
    return names


def own_names(module, library: set[str]) -> set[str]:
    """Names rlpost defines that a module may use: its own module-level names and those of the rlpost modules it
    imports, the members of its classes that do not extend a library class, the C++ extension's functions; and,
    unless a library object has the name too, the members of its library subclasses and the attributes it sets."""
    names = set(vars(module))
    weak: set[str] = set()
    for value in list(vars(module).values()):
        if inspect.ismodule(value) and value.__name__.startswith("rlpost"):
            names |= set(vars(value))
        owner = value if inspect.isclass(value) else type(value) if not inspect.ismodule(value) else None
        if owner is not None and getattr(owner, "__module__", "").startswith("rlpost"):
            extends_library = any(klass.__module__.split(".")[0] in LIBRARIES for klass in owner.__mro__)
            for klass in owner.__mro__:
                if klass.__module__.startswith("rlpost"):
                    members = set(vars(klass)) | set(getattr(klass, "__dataclass_fields__", {}))
                    (weak if extends_library else names).update(members)
    cpp = "".join(path.read_text() for path in skinny_matmul.SOURCES)
    names |= set(re.findall(r'module\.def\("(\w+)"', cpp))  # the extension's functions (skinny_matmul._extension())
    tree = ast.parse(Path(module.__file__).read_text())
    weak |= {
        node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
    }
    return names | (weak - library)


def imported_declarations(module) -> set[str]:
    """The declared names of a patching module and of the patching modules it imports."""
    modules = [module] + [
        value
        for value in vars(module).values()
        if inspect.ismodule(value) and value.__name__.startswith(("rlpost.generation", "rlpost.logprobs"))
    ]
    modules += [
        importlib.import_module(value.__module__)
        for value in vars(module).values()
        if callable(value) and getattr(value, "__module__", "").startswith(("rlpost.generation", "rlpost.logprobs"))
    ]
    return set().union(*(identifiers(value) for m in modules for value in declared(m).values()))


# --- tiny real models of each type the fused decoder supports ------------------------------------------------------

SIZES = dict(
    vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=1,
)  # fmt: skip
MODELS = {  # model type -> a random tiny model, grouped-query attention, biases wherever the type allows them
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SIZES, attention_bias=True, mlp_bias=True)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SIZES)),
}


@pytest.fixture(scope="module")
def tiny() -> dict[str, torch.nn.Module]:
    models = {}
    for kind, build in MODELS.items():
        torch.manual_seed(0)
        model = build()
        for name, parameter in model.named_parameters():  # non-trivial norms and biases (HF initialises 1 and 0)
            if "norm" in name:
                parameter.data.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                parameter.data.normal_(0, 0.5)
        models[kind] = model.eval()
    return models


@pytest.fixture(scope="module")
def generated(tiny) -> dict[str, dict]:
    """One sampled ``generate`` per model type under rlpost's preallocated cache, its model's forward replaced as
    ``fused_decoding`` replaces it: every call's keywords and whether the fused step would take it."""

    def record(calls: list, model, own, *args, **kwargs):
        layers = [None] * len(model.model.layers)  # _decode_call reads only how many there are
        calls.append((args, dict(kwargs), fused_decode._decode_call(model, layers, kwargs) is not None))
        return own(*args, **kwargs)

    runs = {}
    for kind, model in tiny.items():
        calls: list = []
        ids = torch.tensor([[0, 5, 6, 7, 8], [0, 0, 10, 11, 12], [13, 14, 15, 16, 17]])
        model.forward = wraps(model.forward)(partial(record, calls, model, model.forward))
        try:
            with preallocated_generation(model):
                torch.manual_seed(0)
                out = model.generate(input_ids=ids, attention_mask=(ids != 0).long(), max_new_tokens=4,
                                     min_new_tokens=4, do_sample=True, pad_token_id=0, return_dict_in_generate=True)  # fmt: skip
        finally:
            del model.forward
        runs[kind] = {"calls": calls, "out": out}
    return runs


# --- no patch outside rlpost/generation/ and rlpost/logprobs/, and every patch there declared ----------------------


def test_nothing_outside_generation_and_logprobs_patches_a_library():
    """No assignment to a torch / transformers / trl object's attribute, to a ``.forward`` / ``.generate``, or to
    another object's private attribute outside the patching folders (the trainer's own code may set its own state:
    TRL's micro-step counter and buffer, ``CheckpointSeams.TRL_STATE``, pinned in test_trl_contract.py)."""
    found = []
    for path in sources(PACKAGE):
        if path.is_relative_to(PATCHING[0]) or path.is_relative_to(PATCHING[1]):
            continue
        allowed = set(getattr(module_of(path), "TRL_STATE", ())) if "TRL_STATE" in path.read_text() else set()
        found += [
            f"{path.relative_to(REPO)}:{line} {what}" for line, what, attr in patches(path) if attr not in allowed
        ]
    assert not found, f"patches outside rlpost/generation/ and rlpost/logprobs/ (move them there, declared): {found}"


def test_every_patch_in_generation_and_logprobs_is_declared():
    undeclared = []
    for path in sources(*PATCHING):
        declared_patches = set(getattr(module_of(path), "PATCHES", ()))
        for line, what, attr in patches(path):
            library = what.split(".")[0] in LIBRARIES
            ok = what in declared_patches if library else any(p.endswith(f".{attr}") for p in declared_patches)
            if not ok:
                undeclared.append(f"{path.relative_to(REPO)}:{line} {what}")
    assert not undeclared, f"patches not declared in their module's PATCHES: {undeclared}"


def _declared_patches() -> list[str]:
    return sorted({patch for path in sources(*PATCHING) for patch in getattr(module_of(path), "PATCHES", ())})


def resolve(path: str):
    """A declared patch's target in the installed library: ``torch.X.Y`` from torch, ``Class.member`` from
    transformers' top level."""
    parts = path.split(".")
    obj = torch if parts[0] == "torch" else transformers
    for part in parts[1:] if parts[0] == "torch" else parts:
        obj = inspect.getattr_static(obj, part) if isinstance(obj, type) else getattr(obj, part)
    return obj


# each declared patch -> the test that pins what the patch relies on
PATCH_PINS = {
    "torch.multinomial": "test_multinomial_keeps_torch_signature_and_one_sample_draw",
    "torch.nn.Linear.forward": "test_a_linear_forward_is_replaceable_per_instance",
    "PreTrainedModel.forward": "test_every_decode_step_of_generate_is_taken_by_the_fused_step",
    "GenerationMixin.generate": "test_generate_takes_the_preallocated_cache",
    "PreTrainedConfig._attn_implementation": "test_attn_implementation_is_a_settable_config_property",
}


@pytest.mark.parametrize("patch", _declared_patches())
def test_each_declared_patch_exists_and_is_pinned(patch):
    try:
        resolve(patch)
    except AttributeError as error:
        pytest.fail(f"declared patch {patch}: not in the installed torch / transformers ({error})")
    assert PATCH_PINS.get(patch) in globals(), f"declared patch {patch} has no pinning test in PATCH_PINS"


def test_multinomial_keeps_torch_signature_and_one_sample_draw():
    """``multinomial`` stands in for ``torch.multinomial``: the same parameters, and the one-sample draw that
    sampling.cpp reproduces is still argmax(probs / q), q ~ Exp(1) from the default generator."""
    documented = torch.multinomial.__doc__.strip().splitlines()[0]  # multinomial(input, ...) -> LongTensor
    expected = documented.split(" -> ")[0].removeprefix("multinomial")
    assert str(inspect.signature(parallel_sampling.multinomial)) == expected, documented
    schema = [a.name for a in torch.ops.aten.multinomial.default._schema.arguments]
    assert schema == ["self", "num_samples", "replacement", "generator"], schema
    probs = torch.rand(4, 1000, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(7)
    drawn, state = torch.multinomial(probs, 1), torch.get_rng_state()
    torch.manual_seed(7)
    q = torch.empty_like(probs).exponential_(1)
    assert torch.equal(drawn, (probs / q).argmax(-1, keepdim=True)) and torch.equal(state, torch.get_rng_state())


def test_a_linear_forward_is_replaceable_per_instance():
    assert list(inspect.signature(torch.nn.Linear.forward).parameters) == ["self", "input"]
    linear, x = torch.nn.Linear(3, 2), torch.randn(4, 3)
    linear.forward = partial(onednn._forward, linear)  # what use_onednn_linears sets
    assert torch.allclose(linear(x), x @ linear.weight.T + linear.bias, atol=1e-6)


def test_attn_implementation_is_a_settable_config_property():
    prop = resolve("PreTrainedConfig._attn_implementation")
    assert isinstance(prop, property) and prop.fset is not None, "config._attn_implementation is no settable property"


# --- torch ops and the C++ sources --------------------------------------------------------------------------------


def _declared_ops() -> dict[str, str]:
    return {op: schema for path in sources(*PATCHING) for op, schema in getattr(module_of(path), "OPS", {}).items()}


def test_every_torch_op_rlpost_calls_is_declared():
    used = {op: path for path in sources(PACKAGE) for op in used_ops(path)}
    undeclared = {op: str(path.relative_to(REPO)) for op, path in used.items() if op not in _declared_ops()}
    assert not undeclared, f"torch.ops ops used but not declared in an OPS (rlpost/generation/onednn.py): {undeclared}"
    assert used, "the scan found no torch.ops call (onednn.py calls two)"


@pytest.mark.parametrize("op", sorted(_declared_ops()))
def test_op_schema(op):
    if op.startswith("mkldnn::") and not torch.backends.mkldnn.is_available():
        pytest.skip("a torch build without oneDNN: onednn.available() is False and the op is never called")
    namespace, name = op.split("::")
    packet = getattr(getattr(torch.ops, namespace), name, None)
    assert packet is not None, f"torch.ops.{namespace}.{name} is gone in torch {torch.__version__}"
    got = str(packet.default._schema)
    assert got == _declared_ops()[op], f"{op}: its schema changed from {_declared_ops()[op]!r} to {got!r}"


CPP = [*skinny_matmul.SOURCES, skinny_matmul.HEADER]
CPP_INTERNALS = {**skinny_matmul.CPP_INTERNALS, **parallel_sampling.CPP_INTERNALS}


def torch_header(name: str) -> Path | None:
    return next((Path(folder) / name for folder in include_paths() if (Path(folder) / name).is_file()), None)


@pytest.mark.parametrize("name", sorted(CPP_INTERNALS))
def test_cpp_declaration_in_torch_headers(name):
    header, declaration = CPP_INTERNALS[name]
    path = torch_header(header)
    assert path is not None, f"{name}: torch {torch.__version__} has no header {header}"
    assert declaration in path.read_text(), f"{name}: {header} no longer declares {declaration!r}"


def test_cpp_sources_use_only_declared_torch_internals():
    """Every ATen / c10 name the C++ sources use, every generator member and every torch header they include."""
    undeclared, missing = [], []
    for path in CPP:
        text = path.read_text()
        for name in re.findall(r"\b(?:at|c10)::(?:\w+::)*\w+", text):
            if name not in CPP_INTERNALS:
                undeclared.append(f"{path.name}: {name}")
        for member in re.findall(r"\bgenerator->(\w+)", text):
            if not any(key.endswith(f"::{member}") for key in CPP_INTERNALS):
                undeclared.append(f"{path.name}: generator->{member}")
        for header in re.findall(r"#include <((?:ATen|c10|torch)/[\w/.]+)>", text):
            if torch_header(header) is None:
                missing.append(f"{path.name}: {header}")
    assert not undeclared, f"declare these in CPP_INTERNALS (skinny_matmul.py / parallel_sampling.py): {undeclared}"
    assert not missing, f"torch {torch.__version__} lacks headers the C++ sources include: {missing}"


# --- the fused decoder, per supported model type ------------------------------------------------------------------


def test_every_supported_type_has_a_tiny_model():
    assert set(MODELS) == set(fused_decode.SUPPORTED) == set(fused_decode.CONFIG_FIELDS)


@pytest.mark.parametrize("kind", sorted(fused_decode.SUPPORTED))
def test_fused_decoder_parts_on_a_real_model(tiny, kind):
    model = tiny[kind]
    assert model.config.model_type == kind
    assert fused_decode.unsupported_reason(model) is None, fused_decode.unsupported_reason(model)
    for part in fused_decode.MODEL_PARTS:
        assert _has_path(model, part), f"{kind}: the model has no {part} (fused_decode.MODEL_PARTS)"
    for field in fused_decode.CONFIG_FIELDS[kind]:
        assert hasattr(model.config, field), f"{kind}: the config has no {field} (fused_decode.CONFIG_FIELDS)"
    for layer in model.model.layers:
        assert type(layer).__name__ == fused_decode.SUPPORTED[kind]
        for part in fused_decode.LAYER_PARTS:
            assert _has_path(layer, part), f"{kind}: {type(layer).__name__} has no {part} (fused_decode.LAYER_PARTS)"
        for linear in attrgetter(*fused_decode.LINEARS)(layer):
            assert type(linear) is torch.nn.Linear  # what decode_weights packs
        assert layer.post_attention_layernorm.variance_epsilon == layer.input_layernorm.variance_epsilon
        assert type(layer.mlp.act_fn).__name__ == "SiLUActivation" or isinstance(layer.mlp.act_fn, torch.nn.SiLU)


def _has_path(obj, path: str) -> bool:
    for part in path.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _mirror_logits(model, ids: torch.Tensor) -> torch.Tensor:
    """What decode_layer.cpp computes per layer, in torch, on the arguments ``fused_decode`` reads from the model
    (``_fused_layers``, the base's embedding, rotary tables, final norm and the head), for every position of
    ``ids [B, T]`` under a causal mask: RMSNorm (one eps), biased q/k/v, rotate-half rotary, grouped-query
    softmax attention scaled by ``scaling``, o and the residual, RMSNorm, down(silu(gate) * up) and the residual."""
    linears = [linear for layer in model.model.layers for linear in attrgetter(*fused_decode.LINEARS)(layer)]
    linears.append(model.lm_head)
    layers = fused_decode._fused_layers(model, {linear: linear.weight for linear in linears})
    assert layers is not None
    base, heads = model.model, model.config.num_attention_heads
    rows, length = ids.shape
    hidden = base.embed_tokens(ids)
    cos, sin = base.rotary_emb(hidden, torch.arange(length).expand(rows, length))  # [B, T, head_dim]
    cos, sin = cos[:, :, None], sin[:, :, None]

    def norm(x, weight, eps):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rotate(x):
        half = x.size(-1) // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    causal = torch.ones(length, length, dtype=torch.bool).tril()
    for layer in layers:
        (wq, wk, wv, wo, wg, wu, wd), (bq, bk, bv, bo, bg, bu, bd) = layer.packed, layer.biases
        x = norm(hidden, layer.norm1, layer.eps)
        q = torch.nn.functional.linear(x, wq, bq).view(rows, length, heads, -1)
        dim = q.size(-1)
        k = torch.nn.functional.linear(x, wk, bk).view(rows, length, -1, dim)
        v = torch.nn.functional.linear(x, wv, bv).view(rows, length, -1, dim)
        group = heads // k.size(2)
        q, k = rotate(q), rotate(k).repeat_interleave(group, 2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) * layer.scaling
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        attended = torch.einsum("bhqk,bkhd->bqhd", weights, v.repeat_interleave(group, 2)).reshape(rows, length, -1)
        hidden = hidden + torch.nn.functional.linear(attended, wo, bo)
        x = norm(hidden, layer.norm2, layer.eps)
        gate, up = torch.nn.functional.linear(x, wg, bg), torch.nn.functional.linear(x, wu, bu)
        hidden = hidden + torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, wd, bd)
    return model.lm_head(base.norm(hidden))


@pytest.mark.parametrize("kind", sorted(fused_decode.SUPPORTED))
def test_decode_layer_math_is_hf_forward(tiny, kind):
    """decode_layer.cpp's computation, on what fused_decode reads, equals HF's forward for this model type."""
    model = tiny[kind]
    ids = torch.tensor([[3, 5, 6, 7, 8, 9], [10, 11, 12, 13, 14, 15]])
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        got = _mirror_logits(model, ids)
    assert torch.allclose(got, expected, atol=1e-4), (
        f"{kind}: the fused decoder's math no longer matches HF's forward "
        f"(max difference {(got - expected).abs().max():.2e}): check decode_layer.cpp against the model's layer"
    )


def test_sliding_window_qwen2_is_refused():
    config = Qwen2Config(**SIZES, use_sliding_window=True, sliding_window=4, max_window_layers=0)
    assert "sliding" in (fused_decode.unsupported_reason(Qwen2ForCausalLM(config)) or "")


@pytest.mark.parametrize("kind", sorted(fused_decode.SUPPORTED))
def test_every_decode_step_of_generate_is_taken_by_the_fused_step(generated, kind):
    """transformers' ``generate`` passes a decode step only keywords the fused step honours (``HONOURED``), with
    ``position_ids``, and rlpost's cache: every step after the prefill would run fused."""
    calls = generated[kind]["calls"]
    assert len(calls) == 4 and not calls[0][2], "one prefill, then three decode steps"
    for args, kwargs, _ in calls:
        assert not args, f"{kind}: generate calls forward with positional arguments"
        assert set(kwargs) <= fused_decode.HONOURED, (
            f"{kind}: new forward keywords {set(kwargs) - fused_decode.HONOURED}"
        )
    assert all(taken for _, _, taken in calls[1:]), f"{kind}: a decode step the fused step would not take: {calls}"


def test_prefill_keywords_are_forward_parameters(tiny):
    """The keywords of prefix_generation's prefill call are declared, and every supported model's forward takes them."""
    tree = ast.parse(Path(prefix_generation.__file__).read_text())
    calls = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "model"]  # fmt: skip
    keywords = set(prefix_generation.PREFILL_KEYWORDS)
    assert [{k.arg for k in call.keywords} for call in calls] == [keywords], "declare the call's keywords"
    for kind, model in tiny.items():
        parameters = set(inspect.signature(type(model).forward).parameters)
        assert keywords <= parameters, f"{kind}: forward no longer takes {keywords - parameters}"


# --- the preallocated cache ---------------------------------------------------------------------------------------


def _members(cls) -> dict[str, object]:
    return {
        name: getattr(cls, name)
        for name in dir(cls)
        if callable(getattr(cls, name)) and (name == "__init__" or not name.startswith("__"))
    }


def test_dynamic_layer_members_are_all_classified():
    """A member DynamicLayer gains or loses fails here: decide whether PreallocatedLayer must override it."""
    members = set(_members(DynamicLayer))
    classified = set(kv_cache.OVERRIDDEN) | set(kv_cache.INHERITED)
    assert members == classified, (
        f"DynamicLayer's members changed: new {sorted(members - classified)}, gone {sorted(classified - members)} "
        "(classify each in kv_cache.OVERRIDDEN or kv_cache.INHERITED)"
    )
    own = {name for name in vars(PreallocatedLayer) if name in _members(DynamicLayer)}
    assert own == set(kv_cache.OVERRIDDEN), f"PreallocatedLayer overrides {sorted(own)}; OVERRIDDEN lists others"


@pytest.mark.parametrize("name", sorted(kv_cache.OVERRIDDEN))
def test_overridden_dynamic_layer_signature(name):
    got = tuple(inspect.signature(getattr(DynamicLayer, name)).parameters)
    assert got == kv_cache.OVERRIDDEN[name], f"DynamicLayer.{name}: parameters changed to {got}"


def test_dynamic_cache_and_layer_state():
    layer, states = DynamicLayer(), torch.zeros(1, 2, 3, 4)
    layer.update(states, states)
    missing = [name for name in kv_cache.LAYER_STATE if name not in vars(layer)]
    assert not missing, f"DynamicLayer no longer keeps {missing} (kv_cache.LAYER_STATE)"
    cache = DynamicCache()
    missing = [name for name in kv_cache.CACHE_MEMBERS if not hasattr(cache, name)]
    assert not missing, f"DynamicCache has no {missing} (kv_cache.CACHE_MEMBERS)"
    assert cache.layer_class_to_replicate is DynamicLayer, (
        "a config-less DynamicCache no longer replicates a layer class"
    )
    assert list(inspect.signature(DynamicCache.reorder_cache).parameters) == ["self", "beam_idx"]
    missing = [name for name in kv_cache.GENERATION_SETTINGS if not hasattr(GenerationConfig(), name)]
    assert not missing, f"GenerationConfig has no {missing} (kv_cache.GENERATION_SETTINGS)"


@pytest.mark.parametrize("kind", sorted(fused_decode.SUPPORTED))
def test_generate_takes_the_preallocated_cache(generated, tiny, kind):
    """``model.generate`` replaced per instance (wrapped_generate) passes rlpost's cache as ``cache``, and transformers
    fills it layer by layer with PreallocatedLayers."""
    generate = inspect.signature(transformers.GenerationMixin.generate).parameters
    assert "generation_config" in generate and any(p.kind is p.VAR_KEYWORD for p in generate.values())
    model = tiny[kind]
    for part in kv_cache.MODEL_PARTS:
        assert _has_path(model, part), f"{kind}: the model has no {part} (kv_cache.MODEL_PARTS)"
    assert set(kv_cache.GENERATE_KEYWORDS) - {"generation_config"} <= set(
        inspect.signature(type(model).forward).parameters
    )
    out, calls = generated[kind]["out"], generated[kind]["calls"]
    cache = calls[0][1]["cache"]
    assert isinstance(cache, PreallocatedCache) and out.cache is cache
    assert len(cache.layers) == len(model.model.layers) and all(type(la) is PreallocatedLayer for la in cache.layers)
    assert cache.get_seq_length() == out.sequences.size(1) - 1  # the last sampled token is never run


# --- segment attention --------------------------------------------------------------------------------------------


def test_attention_registries():
    for name in segment_attention.REGISTRIES:  # "AttentionInterface.register", ...
        registry_name, method = name.split(".")
        registry = getattr(transformers, registry_name, None) or getattr(transformers.masking_utils, registry_name)
        register = inspect.getattr_static(registry, method)
        assert isinstance(register, classmethod), f"{name} is no longer a classmethod (a global registration)"
        assert list(inspect.signature(getattr(registry, method)).parameters) == ["key", "value"], name
    segment_attention._register()
    assert ALL_ATTENTION_FUNCTIONS.get_interface(segment_attention.NAME, None) is segment_attention.attention
    assert ALL_MASK_ATTENTION_FUNCTIONS[segment_attention.NAME] is sdpa_mask
    masked = set(packing.MASKED_ATTENTION) - {"eager"}  # eager is every model's built-in default
    assert masked <= set(ALL_ATTENTION_FUNCTIONS), (
        f"packing.MASKED_ATTENTION names {masked - set(ALL_ATTENTION_FUNCTIONS)}"
    )


def test_attention_function_signature(tiny):
    """``attention`` takes what transformers' attention modules pass, and hands it on to SDPA's in that order."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    called_with = list(segment_attention.CALLED_WITH)
    for function in (segment_attention.attention, sdpa_attention_forward):
        names = list(inspect.signature(function).parameters)
        assert names[: len(called_with)] == called_with, f"{function.__qualname__} takes {names}"
    parameters = inspect.signature(segment_attention.attention).parameters.values()
    assert any(p.kind is p.VAR_KEYWORD for p in parameters), "attention must take the other keywords (**kwargs)"
    positional, keywords = called_with[:5], set(called_with[5:]) | set(segment_attention.OTHER_KEYWORDS)
    for kind, model in tiny.items():
        attention_class = type(model.model.layers[0].self_attn)
        tree = ast.parse(inspect.getsource(attention_class.forward).strip().replace("\n    ", "\n"))
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Name) and node.func.id == "attention_interface"]  # fmt: skip
        assert len(calls) == 1, f"{kind}: {attention_class.__name__}.forward no longer calls attention_interface once"
        (call,) = calls
        named = {k.arg for k in call.keywords if k.arg is not None}
        assert len(call.args) == len(positional) and named <= keywords, (
            f"{kind}: {attention_class.__name__} calls its attention function with {len(call.args)} positional "
            f"arguments and {sorted(named)} (segment_attention.CALLED_WITH, OTHER_KEYWORDS)"
        )


# --- the code reads nothing it does not declare -------------------------------------------------------------------


@pytest.fixture(scope="module")
def library_names(tiny) -> set[str]:
    """Attribute names of the transformers objects the patching code touches (tiny models, their modules and
    configs, the caches, generation config and outputs, the registries), less the names of plain torch modules,
    tensors and Python objects (``weight``, ``forward``, ``size``): what the patching modules may read only declared."""
    objects: list[object] = [GenerationConfig(), transformers.PreTrainedConfig, ALL_ATTENTION_FUNCTIONS]
    for model in tiny.values():
        objects += [*model.modules(), model.config, model.generation_config]
    layer, cache, states = DynamicLayer(), DynamicCache(), torch.zeros(1, 2, 3, 4)
    layer.update(states, states)
    cache.update(states, states, 0)
    objects += [layer, cache]
    names = set().union(*(set(dir(obj)) for obj in objects))
    names |= set(transformers.modeling_outputs.CausalLMOutputWithPast.__dataclass_fields__)
    generic = set().union(*(set(dir(obj)) for obj in (torch.nn.Linear(1, 1), torch.zeros(1), object(), {}, [])))
    return names - generic


def _scanned() -> list[Path]:
    return [path for path in sources(*PATCHING) if path.name != "__init__.py"]


@pytest.mark.parametrize("path", _scanned(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_patching_module_reads_only_declared_internals(path, library_names):
    """Each private library name a module of rlpost/generation/ or rlpost/logprobs/ uses, and each transformers
    attribute a declaring (patching) module uses, is declared by it or by the patching module it takes it from
    (kv_cache's cache members serve fused_decode and prefix_generation; onednn's ops serve matmul_choice)."""
    module = module_of(path)
    allowed = imported_declarations(module)
    own = own_names(module, library_names)
    patching = bool(declared(module))  # the others (packing, head, ...) use transformers' public API only
    undeclared = {
        name: line
        for name, line in attribute_names(path).items()
        if name not in allowed and name not in own and (is_private(name) or (patching and name in library_names))
    }
    assert not undeclared, (
        f"{path.relative_to(REPO)} uses transformers / private library names it does not declare (name: line): "
        f"{undeclared}; add each to the module's declarations, which this test pins"
    )


def test_calls_to_library_functions_bind_to_their_signatures():
    """Every call in the patching modules to a library function or class imported by name binds to its installed
    signature (keyword names, positional count)."""
    failures = []
    for path in _scanned():
        tree = ast.parse(path.read_text())
        aliases = library_aliases(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name | ast.Attribute):
                continue
            target = dotted(node.func, aliases)
            if target is None or any(isinstance(a, ast.Starred) for a in node.args):
                continue
            module_name, _, attr = target.rpartition(".")
            try:
                obj = _import_dotted(target)
                signature = inspect.signature(obj)
            except (AttributeError, ImportError, TypeError, ValueError):
                continue  # builtins and torch ops without a Python signature (ops are pinned by their schema)
            keywords = {k.arg: None for k in node.keywords if k.arg is not None}
            try:
                signature.bind(*([None] * len(node.args)), **keywords)
            except TypeError as error:
                failures.append(f"{path.relative_to(REPO)}:{node.lineno} {target}: {error}")
    assert not failures, failures


def _import_dotted(target: str):
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(target)
