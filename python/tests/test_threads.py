"""The CLI and the module run OpenMP with a short spin (GOMP_SPINCOUNT=10000) unless the user chose a
wait policy: libgomp's default spin made two threads crawl when another process held a core
(src/qkv/cli/omp_wait.h)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import qkv
from conftest import qkv_bin, write_lines

OMP_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def environment_of_running_cli(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    """The environment `qkv bleu` runs with (it waits for its hypotheses on stdin meanwhile)."""
    ref = write_lines(tmp_path / "ref.txt", ["a b c d"])
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
    env.update(extra)
    p = subprocess.Popen([qkv_bin(), "bleu", str(ref)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    try:
        seen: dict[str, str] = {}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            raw = Path(f"/proc/{p.pid}/environ").read_bytes()
            seen = dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)
            # The re-run replaces the process image and its environment. Without one, a second is
            # long enough to be sure it did not happen.
            if "GOMP_SPINCOUNT" in seen or time.monotonic() > deadline - 9:
                break
            time.sleep(0.02)
        return seen
    finally:
        p.communicate(b"a b c d\n", timeout=30)
        assert p.returncode == 0


def test_cli_sets_a_short_spin_unless_the_user_chose(tmp_path):
    assert environment_of_running_cli(tmp_path, {}).get("GOMP_SPINCOUNT") == "10000"
    assert environment_of_running_cli(tmp_path, {"GOMP_SPINCOUNT": "5"}).get("GOMP_SPINCOUNT") == "5"
    passive = environment_of_running_cli(tmp_path, {"OMP_WAIT_POLICY": "passive"})
    assert passive.get("OMP_WAIT_POLICY") == "passive" and "GOMP_SPINCOUNT" not in passive


def test_module_sets_a_short_spin_unless_the_user_chose():
    package_root = str(Path(qkv.__file__).resolve().parents[1])
    code = "import os, qkv; print(os.environ.get('GOMP_SPINCOUNT'))"
    for extra, want in (({}, "10000"), ({"OMP_WAIT_POLICY": "active"}, "None"), ({"GOMP_SPINCOUNT": "7"}, "7")):
        env = {k: v for k, v in os.environ.items() if k not in OMP_VARIABLES}
        env.update(extra)
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == want, extra


def test_kernels_names_the_instruction_set_and_a_bad_qkv_isa_fails_the_import():
    assert qkv.kernels().split()[0] in ("avx2", "avx512", "avx512_vnni", "avx512_bf16", "amx")
    env = dict(os.environ, QKV_ISA="avx9")
    r = subprocess.run([sys.executable, "-c", "import qkv; qkv.num_threads()"], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "QKV_ISA=avx9: no such instruction set" in r.stderr, r.stderr
    env["QKV_ISA"] = "avx2"
    r = subprocess.run([sys.executable, "-c", "import qkv; print(qkv.kernels())"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("avx2 (QKV_ISA=avx2"), r.stdout + r.stderr
