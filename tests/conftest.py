"""Test hygiene for the whole suite: offline Hub and W&B, loopback-only network, shared fixtures."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from pathlib import Path

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["WANDB_MODE"] = "offline"
os.environ["WANDB_SILENT"] = "true"
os.environ.setdefault("WANDB_DIR", "/tmp")
os.environ["TOKENIZERS_PARALLELISM"] = "false"

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = ROOT / "tests" / "support"
SHARED_DATA = ROOT.parent / "shared" / "data"

# The suite's models are tiny: one intra-op thread per test process is fastest, and with two processes on
# two cores (pytest -n 2) threads would otherwise spin against each other.
torch.set_num_threads(1)

# Framework tests import the toy module from tests/support (in-process and in `zoo` subprocesses).
sys.path.insert(0, str(SUPPORT))
os.environ["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def _is_loopback(address) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX paths
        return True
    host = address[0]
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _guarded(real):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address):
            raise OSError(f"tests may only reach loopback addresses, not {address!r}")
        return real(self, address)

    return connect


socket.socket.connect = _guarded(_real_connect)
socket.socket.connect_ex = _guarded(_real_connect_ex)


@pytest.fixture(autouse=True)
def _deterministic_mode_set_back():
    """An in-process run turns torch's deterministic mode on for its length (callbacks/determinism.py); one that
    left it on would change the kernels of every later test in this process."""
    yield
    if torch.are_deterministic_algorithms_enabled():
        torch.use_deterministic_algorithms(False)
        pytest.fail("the test left torch's deterministic mode on")


@pytest.fixture
def shared_data() -> Path:
    """../shared/data (real GSM8K, CRUXEval, ReGAL, cluster-deletion files); skips when absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip("../shared/data is not available")
    return SHARED_DATA


@pytest.fixture
def toy_config() -> Path:
    return SUPPORT / "toy.yaml"


@pytest.fixture
def info_log():
    """Messages of Lightning's rank-zero logger (rank_zero_info), whatever its propagation is set to."""
    lines: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: lines.append(record.getMessage())
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    level = log.level
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    yield lines
    log.removeHandler(handler)
    log.setLevel(level)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch) -> Path:
    """Run the test inside its own temporary directory (runs/ lands there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path
