"""Every bench JSON records the machine it ran on (devtools/machine.py, issue 41)."""
import json
import os
import platform

from motionmatch.cli import main
from motionmatch.devtools.machine import _cpuinfo, machine_info

ARM_CPUINFO = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve
CPU implementer\t: 0x41

processor\t: 1
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve
"""

X86_CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2
"""


def test_machine_is_this_machine():
    m = machine_info()
    assert set(m) == {"cpu_model", "cores", "usable_cores", "simd", "load_average", "system", "python"}
    assert m["cores"] == os.cpu_count() and 1 <= m["usable_cores"] <= m["cores"]
    assert len(m["load_average"]) == 3 and all(x >= 0 for x in m["load_average"])
    assert m["python"] == platform.python_version()
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name"))
    assert m["cpu_model"] == model
    flags = next(line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags"))
    assert [f for f in ("sse4_2", "avx", "avx2", "avx512f") if f in flags] == \
        [f for f in m["simd"] if f in ("sse4_2", "avx", "avx2", "avx512f")]


def test_cpuinfo_of_x86_and_arm(tmp_path):
    x86, arm = tmp_path / "x86", tmp_path / "arm"
    x86.write_text(X86_CPUINFO)
    arm.write_text(ARM_CPUINFO)
    assert _cpuinfo(str(x86)) == ("AMD EPYC 7B13", ["sse2", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c"])
    assert _cpuinfo(str(arm)) == (None, ["asimd", "asimdhp", "sve"])
    assert _cpuinfo(str(tmp_path / "missing")) == (None, [])


def test_bench_json_records_the_machine(jlpm_db_path, capsys):
    assert main(["bench", "runtime", "--db", str(jlpm_db_path), "--seconds", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["machine"]["cores"] == os.cpu_count() and out["frames"] == 30
    assert main(["bench", "crowd", "--db", str(jlpm_db_path), "--n", "2", "--seconds", "0.05", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["machine"]["cores"] == os.cpu_count() and out["results"][0]["n"] == 2
