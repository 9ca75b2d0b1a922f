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
