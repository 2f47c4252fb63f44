"""The characters a Session drives implement app/driven.py's DrivenCharacter, member by member and
signature by signature (the learned character: tests/lmm/test_lmm_runtime.py)."""
from __future__ import annotations

from app_fixtures import protocol_mismatches
from vr_fixtures import hmd_forward_network
from motionmatch.app.driven import DrivenCharacter
from motionmatch.app.messages import SETTINGS_FIELDS
from motionmatch.app.vr import VRCharacter
from motionmatch.runtime.character import Character
from motionmatch.vr.driver import VRDriverSettings
from motionmatch.vr.synth import database_calibration


def test_classic_character_is_driven(jlpm_db):
    ch = Character(jlpm_db)
    assert protocol_mismatches(ch, DrivenCharacter) == []
    ch.start_input_log()                    # input_log: an InputLog while one runs
    assert protocol_mismatches(ch, DrivenCharacter) == []
    # The page's settings panel sets these on the character's settings, unasked.
    assert [k for k in SETTINGS_FIELDS if not hasattr(ch.settings, k)] == []


def test_vr_character_is_driven_with_its_own_members(jlpm_db):
    ch = VRCharacter(Character(jlpm_db), hmd_forward_network(), database_calibration(jlpm_db), VRDriverSettings())
    assert protocol_mismatches(ch, DrivenCharacter) == []
    assert not hasattr(VRCharacter, "__getattr__")      # nothing beyond the protocol passes through
    assert ch.settings is ch.inner.settings


def test_protocol_mismatches_names_what_is_wrong(jlpm_db):
    class Short:
        def step(self, inp):        # no dt
            pass

    found = protocol_mismatches(Short(), DrivenCharacter)
    assert "not an instance of DrivenCharacter" in found
    assert "db: missing" in found and "reset: missing" in found
    assert any(f.startswith("step(inp)") for f in found)
