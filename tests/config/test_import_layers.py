"""The package's import graph (rlpost/dev/import_layers.py): no cycle, nothing imports the CLI, and the
layer table of docs/architecture.md matches the code."""

from rlpost.dev import import_layers


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
