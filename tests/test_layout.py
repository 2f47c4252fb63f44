"""The package's layout, read from the source with `ast`: no import cycle (imports inside functions
count: they run too, only later), no upward import, no module over MAX_LINES lines."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "motionmatch"
MAX_LINES = 800
# Lower layers that must not reach up: module prefix -> prefixes it may not import.
FORBIDDEN = {
    "motionmatch.search": ("motionmatch.synth", "motionmatch.runtime", "motionmatch.app", "motionmatch.cli"),
    "motionmatch.lmm": ("motionmatch.quality", "motionmatch.scenario", "motionmatch.settings_file",
                        "motionmatch.tuning", "motionmatch.fuzz", "motionmatch.synth", "motionmatch.app",
                        "motionmatch.cli"),
    "motionmatch.runtime": ("motionmatch.app", "motionmatch.cli", "motionmatch.synth", "motionmatch.quality",
                            "motionmatch.tuning"),
    "motionmatch.app": ("motionmatch.cli",),
}


def module_names() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(name: str, path: Path, modules: dict) -> set[str]:
    """The package's modules that `name` imports anywhere in its source (module or function level)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                base = ".".join(base + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            # `from pkg import sub` imports the submodule; `from mod import name` the module.
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in modules:          # `import a.b.c` of a name inside a module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_sees_function_level_and_relative_imports():
    graph = import_graph()
    assert "motionmatch.app.state" in graph["motionmatch.app.server"]
    assert "motionmatch.app.server" in graph["motionmatch.cli.serve"]
    assert len(graph) > 80


def test_no_import_cycle():
    found = cycles(import_graph())
    assert not found, "import cycles (module- or function-level imports):\n" + "\n".join(map(" <-> ".join, found))


def test_no_upward_import():
    bad = [f"{m} imports {t}" for m, targets in import_graph().items() for low, banned in FORBIDDEN.items()
           if m == low or m.startswith(low + ".") for t in targets if t.startswith(banned)]
    assert not bad, "\n".join(bad)


def test_no_module_over_the_line_limit():
    long = {name: n for name, path in module_names().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"
