"""The packed-column constants are written in the source and match the settings schema column for column."""
import ast
import inspect
import math
from pathlib import Path

import pytest

from motionmatch.runtime import controller as C
from motionmatch.runtime import settings as S
from motionmatch.runtime.settings_schema import packed_rows, rows

# Module-level int constants of controller.py that are not settings columns (the state array's width).
NOT_COLUMNS = {C: {"STATE_COLUMNS"}, S: set()}
PACKED = {S: ("character", "warp"), C: ("controller",)}


def _written_ints(module) -> list[tuple[str, int]]:
    """(name, value) of every top-level `NAME = <int literal>` in the module's source, in source order."""
    tree = ast.parse(inspect.getsource(module))
    return [(n.targets[0].id, n.value.value) for n in tree.body
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)
            and isinstance(n.value, ast.Constant) and type(n.value.value) is int]


@pytest.mark.parametrize("module", [S, C], ids=lambda m: m.__name__)
def test_the_written_constants_are_the_schema_columns_in_order(module):
    schema = [(s.column, i) for i, s in enumerate(packed_rows(*PACKED[module]))]
    written = [(n, v) for n, v in _written_ints(module) if n not in NOT_COLUMNS[module]]
    assert written == schema           # same names, same order, same indices; nothing missing, nothing extra
    for name, index in schema:
        assert getattr(module, name) == index


def test_every_packed_setting_lands_in_its_named_column():
    # A distinct value per column, read back through the constants: a constant pointing at another column
    # would read that column's value.
    cs, ctl = S.CharacterSettings(), C.ControllerSettings()
    for table, obj in (("character", cs), ("warp", cs.warp), ("controller", ctl)):
        for k, s in enumerate(r for r in rows(table) if r.column and r.type == "float"):
            setattr(obj, s.key, s.lo + (s.hi - s.lo) * (k + 1) / 64)
    char_row, ctl_row = cs.packed(), ctl.packed()
    for module, row, objs in ((S, char_row, {"character": cs, "warp": cs.warp}), (C, ctl_row, {"controller": ctl})):
        for s in packed_rows(*PACKED[module]):
            if s.type != "float" or s.key in S.SLIDER_EXPONENTS:
                continue
            v = getattr(objs[s.table], s.key)
            assert row[getattr(module, s.column)] == (math.radians(v) if s.radians else v), s.name


def test_no_globals_update_is_left_in_the_package():
    root = Path(S.__file__).resolve().parents[1]
    hits = [str(p.relative_to(root)) for p in root.rglob("*.py") if "globals().update" in p.read_text()]
    assert hits == []
