"""README, Layout: 'nothing runs at import time'. Importing every module of the product in a fresh interpreter, in an
empty working directory, starts no subprocess, opens no socket or file for writing, prints nothing and leaves the
directory empty (tests/support/import_probe.py watches the calls the product's own frames make)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from zoo.registry import PAPERS, ROOT

PROBE = ROOT / "tests" / "support" / "import_probe.py"


def test_importing_the_product_does_nothing(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path / "home"), "PYTHONPATH": ""}
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([sys.executable, str(PROBE), str(ROOT)], cwd=work, env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert {f"zoo.{pid}" for pid in PAPERS} <= set(report["modules"])  # every paper package was imported
    assert not report["events"], report["events"]
    assert not report["printed"], report["printed"]
    assert not list(work.iterdir()), "importing the product wrote into the working directory"


def test_the_probe_sees_a_module_that_works_at_import(tmp_path):
    """The probe would catch it: a product module that writes a file and spawns a process when imported."""
    root = tmp_path / "repo"
    for top in ("zoo", "datamodules", "callbacks"):
        (root / top).mkdir(parents=True)
        (root / top / "__init__.py").write_text("")
    (root / "zoo" / "eager.py").write_text("import subprocess\nopen('made.txt', 'w').write('x')\n"
                                           "subprocess.run(['true'])\nprint('hello')\n")
    out = subprocess.run([sys.executable, str(PROBE), str(root)], cwd=tmp_path, capture_output=True, text=True,
                         timeout=120, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert any(e.startswith("a file opened for writing at") and "eager.py:2" in e for e in report["events"])
    assert any(e.startswith("a subprocess at") and "eager.py:3" in e for e in report["events"])
    assert report["printed"] == "hello\n"
