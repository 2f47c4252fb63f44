"""files/input_bounds.py: .npz members are checked from their .npy headers before numpy allocates, and the
plain-data check of parsed JSON holds one iterator a level, not a stack of every value."""
from __future__ import annotations

import io
import math
import tracemalloc
import zipfile

import numpy as np
import pytest

from motionmatch.files.input_bounds import check_npz, check_plain, parse_json


def _forged(path, shape, dtype=np.float32, data=b"\0" * 64):
    with open(path, "wb") as fh:
        np.savez(fh, ok=np.ones(3))
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("big.npy", buf.getvalue() + data)
    return path


def test_a_forged_npy_header_is_refused_before_anything_is_allocated(tmp_path):
    f = _forged(tmp_path / "m.npz", (10 ** 7, 10 ** 7))
    with pytest.raises(ValueError) as e:
        check_npz(f)
    msg = str(e.value)
    assert str(f) in msg and "'big.npy'" in msg and "10000000x10000000 float32" in msg
    assert f"{4 * 10 ** 14:,} bytes" in msg and "holds 64 bytes" in msg
    # Without the check numpy itself tries the allocation: this is the traceback the door had.
    with np.load(f) as z, pytest.raises(MemoryError, match="Unable to allocate"):
        z["big"]
    # A header declaring fewer bytes than the member holds is damage too; the exact size passes.
    with pytest.raises(ValueError, match="declares a 4 float32 array of 16 bytes"):
        check_npz(_forged(tmp_path / "short.npz", (4,)))
    check_npz(_forged(tmp_path / "exact.npz", (16,)))


def test_object_members_and_unreadable_headers_are_refused(tmp_path):
    with open(tmp_path / "o.npz", "wb") as fh:
        np.savez(fh, a=np.array([None, 1], dtype=object))
    with pytest.raises(ValueError, match=r"member 'a.npy' holds Python objects \(object\)"):
        check_npz(tmp_path / "o.npz")
    with zipfile.ZipFile(tmp_path / "g.npz", "w") as z:
        z.writestr("a.npy", b"\x93NUMPY\x01\x00" + b"\xff" * 40)
    with pytest.raises(ValueError, match=r"g.npz: member 'a.npy': not an .npy array"):
        check_npz(tmp_path / "g.npz")


def test_check_plain_names_the_field_and_keeps_no_stack_of_values():
    with pytest.raises(ValueError, match=r"^f\.a\[1\]\.b: nan is not a finite number$"):
        check_plain({"a": [1, {"b": math.nan}]}, where="f")
    with pytest.raises(ValueError, match=r"^x\[0\]\[0\]: nested deeper than 2 levels$"):
        check_plain([[[1]]], where="x", max_nesting=2)
    with pytest.raises(ValueError, match=r"^k: the integer is beyond"):
        check_plain({"k": 2 ** 70})
    check_plain([[1]], max_nesting=2)
    # A million values: the check at 84db000 pushed a (value, name, depth) entry for each, 129 MB at its
    # peak; now a float64 copy of the list at most (8.6 MB measured).
    values = [0.5] * 1_000_000
    tracemalloc.start()
    check_plain({"extras": values})
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 16 * len(values), peak
    with pytest.raises(ValueError, match=r"^extras\[999999\]: inf is not a finite number$"):
        check_plain({"extras": values[:-1] + [math.inf]})
    with pytest.raises(ValueError, match=r"^extras\[1\]: the integer is beyond"):
        check_plain({"extras": [0.5, 2 ** 64] + values[:100]})


def test_parse_json_of_many_values_stays_near_the_parsed_size():
    raw = b"[" + b"0," * 2_000_000 + b"0]"
    tracemalloc.start()
    data = parse_json(raw, where="blob")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(data) == 2_000_001
    # 51 MB measured: the list (16 MB), its float64 copy and the text's; 270 MB at 84db000.
    assert peak < 80 << 20, peak
