"""The package's layout, read from the source with `ast`: no import cycle (imports inside functions
count: they run too, only later), no upward import, no module over MAX_LINES lines."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "motionmatch"
MAX_LINES = 800
# The folders, lowest first: a module may import its own folder and the folders before it, never one after.
# Modules on the top floor (notebook, __main__) stand above every folder; `motionmatch/__init__.py` imports
# none of the package.
LAYERS = ("maths", "files", "motion", "io", "search", "posedb", "body", "world", "lmm", "runtime", "offline",
          "vr", "app", "devtools", "cli")
TOP_FLOOR_MAX = 8


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


def layer_of(name: str) -> int:
    """The layer's rank of a module: its folder's place in LAYERS; the top floor above them all."""
    parts = name.split(".")
    if len(parts) == 1:
        return -1                                      # the package itself
    if parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return len(LAYERS)


def test_every_folder_has_a_layer_and_the_top_floor_is_small():
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert set(folders) == set(LAYERS), f"folders without a layer (or layers without a folder): {folders}"
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= TOP_FLOOR_MAX, f"top floor: {top}"


def test_no_upward_import():
    graph = import_graph()
    assert not graph["motionmatch"], f"motionmatch/__init__.py imports {graph['motionmatch']}"
    bad = [f"{m} imports {t}" for m, targets in graph.items() for t in targets if layer_of(t) > layer_of(m)]
    assert not bad, "\n".join(bad)


def test_the_layer_check_sees_an_upward_import():
    assert layer_of("motionmatch.maths.rotations") < layer_of("motionmatch.runtime.crowd")
    assert layer_of("motionmatch.cli.synth") > layer_of("motionmatch.app.server") > layer_of("motionmatch.offline.synth")
    assert layer_of("motionmatch.notebook") > layer_of("motionmatch.app.server")


def test_no_module_over_the_line_limit():
    long = {name: n for name, path in module_names().items()
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def function_level_imports() -> list[str]:
    """Imports of the package's own modules inside functions, outside cli/ (whose commands import their
    work when run, so that `motionmatch --help` answers at once)."""
    found = []
    for name, path in module_names().items():
        if name.startswith("motionmatch.cli"):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("motionmatch")):
                    found.append(f"{name}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(a.name.startswith("motionmatch") for a in node.names):
                    found.append(f"{name}:{node.lineno}")
    return found


def test_a_modules_header_says_what_it_needs():
    found = function_level_imports()
    assert not found, "package modules imported inside functions (import them at the top):\n" + "\n".join(found)


# Kernels take named tuples, as the stages do (runtime/stage_calls.py), not long lists of arrays.
MAX_PARAMETERS = 12
PARAMETER_FOLDERS = ("runtime", "search")


def long_signatures() -> list[str]:
    """Functions in PARAMETER_FOLDERS with more than MAX_PARAMETERS parameters (positional, keyword-only,
    *args and **kwargs each count one)."""
    found = []
    for folder in PARAMETER_FOLDERS:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            for fn in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                    continue
                a = fn.args
                n = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs)
                     + (a.vararg is not None) + (a.kwarg is not None))
                if n > MAX_PARAMETERS:
                    name = getattr(fn, "name", "lambda")
                    found.append(f"{path.relative_to(PACKAGE)}:{fn.lineno} {name} ({n})")
    return found


def test_no_function_takes_more_than_twelve_parameters():
    found = long_signatures()
    assert not found, f"functions over {MAX_PARAMETERS} parameters (group them in named tuples):\n" + "\n".join(found)
