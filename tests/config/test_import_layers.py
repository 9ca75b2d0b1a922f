"""The package's import graph (rlpost/dev/import_layers.py): no cycle, nothing imports the CLI, and the
layer table of docs/architecture.md matches the code; and the layer between the trainer and the components:
no module outside rlpost/trainer/ and rlpost/algorithms/ touches ``trainer._<name>``."""

import ast
from pathlib import Path

from rlpost.dev import import_layers

from support.paths import REPO


def test_cycles_and_layers_of_a_hand_built_graph():
    # a -> b -> c, a -> c: layers c=0, b=1, a=2; adding c -> a closes the cycle a, b, c
    graph = {"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": set()}
    assert import_layers.cycles(graph) == []
    assert import_layers.layers(graph) == {"a": 2, "b": 1, "c": 0, "d": 0}
    graph["c"] = {"a"}
    assert import_layers.cycles(graph) == [["a", "b", "c"]]


def test_the_package_has_no_cycle_and_nothing_imports_the_cli():
    graph = import_layers.import_graph()
    assert len(graph) > 150 and "rlpost.trainer.core" in graph["rlpost.algorithms.ppo"] | {
        d for m in graph["rlpost.algorithms.ppo"] for d in graph[m]
    }
    assert import_layers.cycles(graph) == []
    assert [m for m, deps in graph.items() if "rlpost.cli" in deps] == []


def test_architecture_doc_is_current(capsys):
    assert import_layers.main(["--check"]) == 0, capsys.readouterr().out


# ---- the house: role-named packages, story files at the top, tests that mirror the package ----------------
STORY_FILES = {"__init__", "cli", "app", "train", "build", "run", "pipeline", "components"}


def test_a_hand_built_module_graph_collapses_onto_packages():
    graph = {"rlpost.a.x": {"rlpost.b.y"}, "rlpost.b.y": {"rlpost.c"}, "rlpost.c": set(), "rlpost.a.z": {"rlpost.a.x"}}
    assert import_layers.package_graph(graph) == {"a": {"b"}, "b": {"c"}, "c": set()}  # a -> a is no edge
    graph["rlpost.c"] = {"rlpost.a.z"}
    assert import_layers.cycles(import_layers.package_graph(graph)) == [["a", "b", "c"]]


def test_the_package_graph_has_no_cycle_and_core_is_the_floor():
    packages = import_layers.package_graph(import_layers.import_graph())
    assert import_layers.cycles(packages) == []
    assert packages["core"] == set()  # the bottom floor imports no other rlpost package
    assert not [p for p, deps in packages.items() if "cli" in deps]  # nothing imports the CLI
    assert not [p for p, deps in packages.items() if "dev" in deps]  # the generators are never imported at run time


def test_only_the_story_files_sit_at_the_top_of_the_package():
    root = import_layers.PACKAGE_ROOT
    loose = sorted(p.stem for p in root.glob("*.py") if p.stem not in STORY_FILES)
    assert loose == [], f"modules at the top of rlpost/ that belong in a role-named package: {loose}"
    packages = sorted(p.name for p in root.iterdir() if (p / "__init__.py").is_file())
    assert len(packages) + len(STORY_FILES) <= 40, packages  # the top level shows the architecture at a glance


def test_unit_test_folders_mirror_the_package():
    root, unit = import_layers.PACKAGE_ROOT, import_layers.REPO / "tests" / "unit"
    names = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()} | STORY_FILES
    strays = sorted(p.name for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__" and p.name not in names)
    assert strays == [], f"tests/unit folders that name no package (or story module) of rlpost: {strays}"
    loose = sorted(p.name for p in unit.glob("*.py"))
    assert loose == [], f"tests at the top of tests/unit (each belongs in its package's folder): {loose}"


def test_every_test_module_has_its_own_basename():
    """pytest imports test files by basename (rootdir-relative ``rootdir`` mode): two ``test_x.py`` in two folders
    stop collection on a fresh checkout (CI run of stop 51)."""
    tests = import_layers.REPO / "tests"
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert clashes == {}, f"test modules sharing a basename (rename one): {clashes}"


# ---- components never touch the trainer's private members (issue 47) ----------------------------------------
TRAINER_PACKAGES = ("trainer", "algorithms")  # the trainer's own code: it may read and write its own state


def _trainer_like(node: ast.expr, aliases: set[str]) -> bool:
    """An expression naming the trainer: ``trainer``, ``<anything>.trainer`` (``self.trainer``, ``ctx.trainer``),
    or a local name bound to one of those (``t = self.trainer``)."""
    if isinstance(node, ast.Name):
        return node.id == "trainer" or node.id in aliases
    return isinstance(node, ast.Attribute) and node.attr == "trainer"


def _trainer_aliases(tree: ast.AST) -> set[str]:
    """Names assigned from a trainer expression anywhere in the module (``t = self.trainer``, ``a, t = x, trainer``)."""
    aliases: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            pairs = [(target, node.value)]
            if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                pairs = list(zip(target.elts, node.value.elts))
            aliases |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _trainer_like(v, set())}
    return aliases


def trainer_private_accesses(path: Path) -> list[str]:
    """``file:line: expression`` for every read or write of ``<trainer>._<name>`` in one module, including
    ``getattr`` / ``setattr`` / ``hasattr`` with a literal ``"_<name>"``."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = _trainer_aliases(tree)
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    found = []
    for node in ast.walk(tree):
        name, owner = None, None
        if isinstance(node, ast.Attribute):
            name, owner = node.attr, node.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            name, owner = node.args[1].value, node.args[0]
        if name and name.startswith("_") and not name.startswith("__") and _trainer_like(owner, aliases):
            found.append((node.lineno, f"{where}:{node.lineno}: {ast.unparse(node)}"))
    return [line for _, line in sorted(found)]


def test_the_scan_finds_every_form_of_a_private_trainer_access(tmp_path):
    source = tmp_path / "component.py"
    source.write_text(
        "def f(trainer, ctx, x):\n"
        "    trainer._metrics['train']['a'].append(1)\n"  # a read
        "    ctx.trainer._process_slice(4)\n"  # through the rollout context
        "    self.trainer._tokenizer = None\n"  # a write
        "    every, t = 3, self.trainer\n"
        "    t._step\n"  # through an alias
        "    getattr(trainer, '_buffered_inputs')\n"
        "    trainer.model, trainer.__class__, x._private, ctx.rows\n"  # public, dunder, not the trainer: fine
    )
    found = trainer_private_accesses(source)
    assert {line.split(": ", 1)[1] for line in found} == {
        "trainer._metrics",
        "ctx.trainer._process_slice",
        "self.trainer._tokenizer",
        "t._step",
        "getattr(trainer, '_buffered_inputs')",
    }


def test_no_component_reads_or_writes_a_private_trainer_member():
    """DESIGN.md: components get typed inputs (ScoringInputs, RolloutContext, LossInputs, ...), never the trainer's
    private state; only rlpost/trainer/ and rlpost/algorithms/ (the trainer itself) may touch ``trainer._<name>``."""
    package = REPO / "rlpost"
    found = [
        line
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] not in TRAINER_PACKAGES
        for line in trainer_private_accesses(path)
    ]
    assert not found, "components touch the trainer's private members:\n" + "\n".join(found)
