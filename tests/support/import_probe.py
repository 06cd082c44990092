"""Imports every module of the product (zoo/, datamodules/, callbacks/) in a fresh interpreter and prints, as JSON,
what the product's own code did while being imported: sockets it connected, subprocesses it started, files it opened
for writing, and what it printed. Libraries imported along the way may do such things (matplotlib lists fonts); a
call counts as the product's when the frame that made it is a product file. Usage: python import_probe.py ROOT."""

from __future__ import annotations

import builtins
import contextlib
import importlib
import io
import json
import pkgutil
import socket
import subprocess
import sys
import sysconfig
import traceback
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve()
PRODUCT = tuple(str(ROOT / top) for top in ("zoo", "datamodules", "callbacks"))
events: list[str] = []


STDLIB = sysconfig.get_paths()["stdlib"]


def _caller_is_product() -> str | None:
    """The nearest frame outside the standard library (subprocess.run calls Popen) and this probe decides."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        if frame.filename == __file__ or (frame.filename.startswith(STDLIB) and "-packages" not in frame.filename):
            continue
        return f"{frame.filename}:{frame.lineno}" if frame.filename.startswith(PRODUCT) else None
    return None


def _watch(owner, name: str, what: str, counts=lambda *a, **k: True) -> None:
    real = getattr(owner, name)

    def wrapper(*args, **kwargs):
        where = _caller_is_product()
        if where and counts(*args, **kwargs):
            events.append(f"{what} at {where}")
        return real(*args, **kwargs)

    setattr(owner, name, wrapper)


def _writes(file, mode="r", *args, **kwargs) -> bool:
    return any(c in str(mode) for c in "wax+")


_watch(socket.socket, "connect", "a socket connect")
_watch(subprocess, "Popen", "a subprocess")
_watch(builtins, "open", "a file opened for writing", _writes)
_watch(io, "open", "a file opened for writing", _writes)

sys.path.insert(0, str(ROOT))
names = []
printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    for top in ("zoo", "datamodules", "callbacks"):
        names.append(top)
        importlib.import_module(top)
        names += [m.name for m in pkgutil.walk_packages(importlib.import_module(top).__path__, top + ".")]
    for name in names:
        importlib.import_module(name)
print(json.dumps({"modules": names, "events": events, "printed": printed.getvalue()}))
