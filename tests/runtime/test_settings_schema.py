"""The settings schema is the one source of settings: runtime dataclasses, settings files and `tune` agree."""
import dataclasses
import math

import numpy as np
import pytest

from motionmatch.runtime import settings as S
from motionmatch.runtime.controller import ControllerSettings
from motionmatch.runtime.settings import CharacterSettings
from motionmatch.runtime.settings_schema import SETTINGS, SettingError, defaults, rows, setting
from motionmatch.runtime.warping import WarpSettings
from motionmatch.runtime.settings_file import SettingsError, load_settings, settings_from_dict, settings_to_dict

NUMERIC = [s for s in SETTINGS if s.type in ("float", "int") and s.stored]
DATACLASSES = {"character": CharacterSettings, "warp": WarpSettings, "controller": ControllerSettings}


def _toml(table: str, key: str, value) -> str:
    head = "[character.weights]" if table == "weights" else f"[{table}]"
    return f"{head}\n{'hips_velocity' if table == 'weights' else key} = {value!r}\n"


def _beyond(s, side: int):
    """The first value past a bound: the next integer, or the bound moved by a millionth (at least 1e-9)."""
    bound = s.hi if side > 0 else s.lo
    return bound + side if s.type == "int" else bound + side * max(abs(bound) * 1e-6, 1e-9)


@pytest.mark.parametrize("s", NUMERIC, ids=lambda s: s.name)
def test_a_settings_file_at_each_bound_loads_and_one_beyond_is_refused_naming_the_key(tmp_path, s):
    name = f"weights.hips_velocity" if s.table == "weights" else s.name
    for side, bound in ((1, s.hi), (-1, s.lo)):
        p = tmp_path / "at.toml"
        p.write_text(_toml(s.table, s.key, bound))
        rs = load_settings(p)
        got = (rs.character.weights["hips_velocity"] if s.table == "weights"
               else getattr(DATACLASSES_OF(rs)[s.table], s.key))
        assert got == bound
        p.write_text(_toml(s.table, s.key, _beyond(s, side)))
        with pytest.raises(SettingsError) as e:
            load_settings(p)
        word = "maximum" if side > 0 else "minimum"
        assert name in str(e.value) and f"{word} {bound:g}" in str(e.value) and str(p) in str(e.value)


def DATACLASSES_OF(rs):
    return {"character": rs.character, "warp": rs.character.warp, "controller": rs.controller}


@pytest.mark.parametrize("text, words", [
    ("character = 5\n", ["[character] must be a table", "int"]),
    ("character = true\n", ["[character] must be a table", "bool"]),
    ("warp = \"x\"\n", ["[warp] must be a table", "str"]),
    ("[character]\nweights = 1.5\n", ["[character.weights] must be a table", "float"]),
    ("[character]\nsearch_interval = 1" + "0" * 400 + "\n", ["character.search_interval", "finite number"]),
    ("[character]\nend_exclude = 1" + "0" * 30 + "\n", ["character.end_exclude", "maximum 600"]),
    ("[character]\nbias = nan\n", ["character.bias", "finite number"]),
    ("[warp]\nrate_max = inf\n", ["warp.rate_max", "finite number"]),
    ("[controller]\nstop_halflife = -inf\n", ["controller.stop_halflife", "finite number"]),
    ("[character.weights]\nhips_velocity = nan\n", ["weights.hips_velocity", "finite number"]),
    ("[character]\nend_exclude = 2.5\n", ["character.end_exclude", "integer"]),
    ("[character]\nsearch_interval = \"fast\"\n", ["character.search_interval", "number"]),
    ("[character]\nmode = \"lmm\"\n", ["[character] mode is set at run time", "stored: false"]),
    ("[controller]\ncamera_yaw = 1.0\n", ["[controller] camera_yaw is set at run time", "stored: false"]),
    ("weights = 1.5\n", ["[weights] must be a table", "float"]),
    ("[weights]\nhips_velocity = 1.0\n[character.weights]\nhips_velocity = 2.0\n", ["weights given twice"]),
    ("[character]\nfoo = 1\n", ["unknown key 'foo'"]),
])
def test_hostile_settings_files_are_refused_cleanly(tmp_path, text, words):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    with pytest.raises(SettingsError) as e:
        load_settings(p)
    for w in words:
        assert w in str(e.value)


def test_dataclasses_hold_exactly_the_schema_fields_with_its_defaults():
    extra = {"character": {"weights", "model", "warp"}, "warp": set(), "controller": set()}
    for table, cls in DATACLASSES.items():
        fields = {f.name for f in dataclasses.fields(cls)} - extra[table]
        assert fields == {s.key for s in rows(table)}, table
        obj = cls()
        for key, value in defaults(table).items():
            assert getattr(obj, key) == value, f"{table}.{key}"
            setting(table, key).check(value)       # every default within its own bounds


def test_tune_ranges_and_app_controls_lie_within_the_bounds():
    for s in SETTINGS:
        if s.tune is not None and not s.tune.choices:
            assert s.lo <= s.tune.low < s.tune.high <= s.hi, s.name
        if s.tune is not None and s.tune.choices:
            assert set(s.tune.choices) <= set(s.choices or (True, False)), s.name
    assert setting("character", "inertialization").choices == ("spring", "quintic", "off", "dead_blending")


def test_runtime_refuses_what_a_file_refuses_naming_the_key():
    cs = CharacterSettings()
    cs.warp.spine_twist_limit_deg = 181.0
    with pytest.raises(SettingError, match=r"warp\.spine_twist_limit_deg .*maximum 180"):
        cs.packed()
    cs = CharacterSettings(halflife=0.005, search_interval=2.0)      # the bounds themselves are accepted
    assert cs.packed()[S.HALFLIFE] == 0.005
    with pytest.raises(SettingError, match=r"weights\.hips_velocity"):
        CharacterSettings(weights={"hips_velocity": -1.0}).packed()


def test_a_round_trip_through_a_file_keeps_every_stored_setting():
    rs = settings_from_dict({"character": {"responsiveness": 0.8, "bias": 0.2}, "warp": {"spine_twist_limit_deg": 120.0}})
    again = settings_from_dict(settings_to_dict(*rs))
    assert again.character == rs.character and again.controller == rs.controller


def test_sliders_at_one_half_change_nothing_and_scale_relative_to_the_settings():
    base = CharacterSettings().packed()
    np.testing.assert_array_equal(CharacterSettings(responsiveness=0.5, quality=0.5).packed(), base)
    fast = CharacterSettings(responsiveness=1.0).packed()
    assert fast[S.SEARCH_INTERVAL] == pytest.approx(base[S.SEARCH_INTERVAL] / 2)
    assert fast[S.BIAS] == pytest.approx(base[S.BIAS] / 2)
    smooth = CharacterSettings(quality=1.0, bias=0.3).packed()
    assert smooth[S.BIAS] == pytest.approx(0.6) and smooth[S.SEARCH_INTERVAL] == base[S.SEARCH_INTERVAL]
    # Relative to the settings (so re-tuned defaults keep their meaning), clipped to the bounds.
    assert CharacterSettings(search_interval=1.5, responsiveness=0.0).packed()[S.SEARCH_INTERVAL] == 2.0
    s = CharacterSettings(responsiveness=1.0, quality=0.0)
    assert s.channel_weight("trajectory_position", 3.0) == pytest.approx(6.0)
    assert s.channel_weight("velocity", 1.0) == pytest.approx(0.5)
    assert s.channel_weight("time_to_event", 1.0) == 1.0
    assert math.isclose(CharacterSettings().channel_weight("position", 0.33), 0.33)
