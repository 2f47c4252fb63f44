"""`motionmatch settings --json --db DB` and settings files agree key by key: every table and key it lists is
accepted in a file at its bounds and refused just past them, naming the key; a file's [weights] apply."""
from __future__ import annotations

import contextlib
import io
import json
import math

import numpy as np
import pytest

from motionmatch.app.backend import runtime_backend
from motionmatch.cli import main
from motionmatch.runtime.settings_file import SettingsError, load_settings
from motionmatch.runtime.settings_schema import TABLES

# A short walk that turns: long enough for a few searches, so the weights pick different frames.
SCENARIO = {"duration": 1.5, "inputs": [{"t": 0.0, "move": [0.0, 1.0], "run": False, "strafe": False, "look": None},
                                        {"t": 0.7, "move": [1.0, 0.0], "run": True, "strafe": False, "look": None}]}


@pytest.fixture(scope="module")
def schema(jlpm_db_path) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["settings", "--json", "--db", str(jlpm_db_path)]) == 0
    return json.loads(out.getvalue())


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, (int, float)) else json.dumps(v)


def _file(tmp_path, table: str, key: str, value):
    p = tmp_path / "s.toml"
    p.write_text(f"[{table}]\n{json.dumps(key)} = {_toml_value(value)}\n")
    return p


def _loaded(rs, table: str, key: str):
    if table == "weights":
        return rs.character.weights[key]
    return getattr({"character": rs.character, "warp": rs.character.warp, "controller": rs.controller}[table], key)


def _inside_and_outside(row: dict) -> tuple[list, list]:
    """Values the row accepts (its bounds, its choices) and values just outside (past a bound, or not a choice)."""
    kind = row["type"]
    if kind in ("float", "int"):
        lo, hi = row["min"], row["max"]
        if kind == "int":
            return [lo, hi], [lo - 1, hi + 1]
        return [float(lo), float(hi)], [math.nextafter(lo, -math.inf), math.nextafter(hi, math.inf)]
    if kind == "choice":
        return list(row["choices"]), ["not-a-choice"]
    if kind == "bool":
        return [True, False], [1]
    return ["run & !stop"], [1.5]


def test_the_json_lists_the_tables_settings_files_read(schema):
    assert list(schema) == list(TABLES) == ["character", "warp", "controller", "weights"]
    assert len(schema["weights"]) == 7 and "*" not in schema["weights"]     # the database's own channels


@pytest.mark.parametrize("table", TABLES)
def test_every_key_is_accepted_at_its_bounds_and_refused_just_past_them(schema, jlpm_db, tmp_path, table):
    channels = jlpm_db.features.schema.names
    checked = 0
    for key, row in schema[table].items():
        inside, outside = _inside_and_outside(row)
        if row.get("stored") is False:
            # Set at run time (mode by --lmm, camera_yaw by the app): the JSON says so and a file is refused.
            with pytest.raises(SettingsError, match=rf"\[{table}\] {key} is set at run time.*stored: false"):
                load_settings(_file(tmp_path, table, key, row["default"]), channels)
            continue
        for v in inside:
            got = _loaded(load_settings(_file(tmp_path, table, key, v), channels), table, key)
            assert got == v and type(got) is type(v), f"{table}.{key} = {v!r} read as {got!r}"
        for v in outside:
            p = _file(tmp_path, table, key, v)
            with pytest.raises(SettingsError) as e:
                load_settings(p, channels)
            message = str(e.value)
            assert f"{table}.{key} = " in message and str(p) in message, message
            if row["type"] in ("float", "int"):
                word, bound = ("minimum", row["min"]) if v < row["min"] else ("maximum", row["max"])
                assert f"{word} {bound:g}" in message, message
        checked += 1
    assert checked == sum(r.get("stored", True) for r in schema[table].values()) > 0


def _synth(db_path, scenario, out, settings=None) -> bytes:
    args = ["synth", "--db", str(db_path), "--scenario", str(scenario), "--out", str(out), "--quiet"]
    assert main(args + (["--settings", str(settings)] if settings else [])) == 0
    return (out / "motion.bvh").read_bytes()


def test_weights_from_a_file_apply_in_synth_and_the_app(schema, jlpm_db, jlpm_db_path, tmp_path):
    # The trajectory alone: the pose channels at the schema's minimum, the trajectory at its maximum.
    weights = {ch: (row["max"] if ch.startswith("trajectory") else row["min"]) for ch, row in schema["weights"].items()}
    lines = [f"{ch} = {w!r}" for ch, w in weights.items()]
    top, nested = tmp_path / "top.toml", tmp_path / "nested.toml"
    top.write_text("\n".join(["[weights]", *lines, ""]))
    nested.write_text("\n".join(["[character.weights]", *lines, ""]))
    scenario = tmp_path / "walk_turn.json"
    scenario.write_text(json.dumps(SCENARIO))

    plain = _synth(jlpm_db_path, scenario, tmp_path / "plain")
    from_top = _synth(jlpm_db_path, scenario, tmp_path / "top", top)
    assert from_top != plain                                            # the weights changed the motion
    assert _synth(jlpm_db_path, scenario, tmp_path / "nested", nested) == from_top

    # serve --settings: every new character of the app starts from the file's weights.
    names = jlpm_db.features.schema.names
    app_default = runtime_backend(jlpm_db).new_character()
    app_top = runtime_backend(jlpm_db, settings=load_settings(top, names)).new_character()
    assert app_top.settings.weights == weights
    assert not np.array_equal(app_top.features_norm, app_default.features_norm)
    app_nested = runtime_backend(jlpm_db, settings=load_settings(nested, names)).new_character()
    np.testing.assert_array_equal(app_top.features_norm, app_nested.features_norm)
