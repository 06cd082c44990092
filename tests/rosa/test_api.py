"""The shape of the RoSA package (issue #15): no work at import time, the SDDMM kernel is an argument, no private
name crosses a module boundary, and test oracles live under tests/, not in the product."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import lightning.pytorch as L
import pytest
import torch
from torch import nn

import zoo.rosa
import zoo.rosa.layer as layer_mod
from zoo.errors import ZooError
from zoo.registry import ROOT
from zoo.rosa.layer import RoSALinear

PACKAGE = sorted((ROOT / "zoo" / "rosa").glob("*.py"))
ROSA_FILES = PACKAGE + [ROOT / "benchmarks" / "rosa_train_step.py", ROOT / "tests" / "support" / "rosa_ddp_probe.py",
                        *sorted((ROOT / "tests" / "rosa").glob("*.py"))]


def test_importing_the_package_runs_no_kernel(monkeypatch):
    """Executing each module of zoo/rosa afresh (under another name) must not run a sparse kernel (the layer used to
    probe `torch.sparse.sampled_addmm` at import to pick one algorithm for the whole process)."""
    calls = []
    real = torch.sparse.sampled_addmm
    monkeypatch.setattr(torch.sparse, "sampled_addmm", lambda *a, **k: calls.append(1) or real(*a, **k))
    for path in PACKAGE:
        spec = importlib.util.spec_from_file_location(f"_fresh_rosa_{path.stem}", path)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    assert not calls, "a zoo/rosa module ran torch.sparse.sampled_addmm at import"
    assert not hasattr(layer_mod, "CSR_SDDMM")  # no process-wide kernel choice


@pytest.mark.parametrize("kernel", ["csr", "gather", "blocked"])
def test_the_sddmm_kernel_is_an_argument(monkeypatch, kernel):
    used = []
    layer_mod.csr_sddmm_available("cpu")  # the build's one-off probe, before counting kernel calls
    for name in ("csr", "gather", "blocked"):
        real = getattr(layer_mod, f"sddmm_{name}")
        monkeypatch.setattr(layer_mod, f"sddmm_{name}",
                            lambda *a, _n=name, _r=real, **k: used.append(_n) or _r(*a, **k))
    torch.manual_seed(0)
    layer = RoSALinear(nn.Linear(12, 10), r=2, lora_alpha=2, density=0.1, sddmm=kernel)
    layer.set_mask(torch.randperm(120)[: layer.nnz])
    layer(torch.randn(3, 12)).sum().backward()
    assert used == [kernel]


def test_auto_kernel_and_bad_kernel_names(monkeypatch):
    used = []
    real = layer_mod.sddmm_csr
    monkeypatch.setattr(layer_mod, "sddmm_csr", lambda *a, **k: used.append("csr") or real(*a, **k))
    layer = RoSALinear(nn.Linear(12, 10), r=0, lora_alpha=1, density=0.1)  # the documented default: "auto"
    assert layer.sddmm == "auto"
    layer.set_mask(torch.randperm(120)[: layer.nnz])
    layer(torch.randn(3, 12)).sum().backward()
    assert used == (["csr"] if layer_mod.csr_sddmm_available("cpu") else [])
    with pytest.raises(ZooError, match="unknown sddmm kernel 'fast'"):
        RoSALinear(nn.Linear(4, 4), r=1, lora_alpha=1, density=0.1, sddmm="fast")


def test_the_module_passes_its_kernel_to_every_layer(tiny_llama):
    from zoo.rosa import RoSAModule

    module = RoSAModule(model=tiny_llama, tokenizer="byt5", r=2, lora_alpha=4, density=0.05, sddmm="gather")
    assert {layer.sddmm for layer in module.layers.values()} == {"gather"}
    with pytest.raises(ZooError, match="sddmm"):
        RoSAModule(model=tiny_llama, tokenizer="byt5", r=2, density=0.05, sddmm="fast")


def _own_names(tree: ast.AST) -> set[str]:
    """Underscore names this file defines itself: functions, classes, module globals and attributes it assigns."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return {n for n in own if n.startswith("_")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("path", ROSA_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_crosses_a_module(path):
    """No `_name` is imported from another module, read off an object defined elsewhere (`layer._ready`,
    Lightning's `self._trainer`), or overridden from torch/Lightning base classes (`_load_from_state_dict`)."""
    tree = ast.parse(path.read_text())
    own = _own_names(tree)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            bad += [f"line {node.lineno}: imports {a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            bad.append(f"line {node.lineno}: reads .{node.attr}")
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and _private(item.name) and any(
                        hasattr(base, item.name) for base in (nn.Module, L.LightningModule, torch.autograd.Function)):
                    bad.append(f"line {item.lineno}: overrides the private {item.name}")
    assert not bad, "\n".join(bad)


def test_test_oracles_are_not_in_the_product():
    assert "DenseMaskedLinear" not in zoo.rosa.__all__ and not hasattr(layer_mod, "DenseMaskedLinear")
    product = list((ROOT / "zoo").rglob("*.py")) + list((ROOT / "callbacks").rglob("*.py"))
    assert not [p for p in product if "DenseMaskedLinear" in p.read_text()]
    assert "from tests" not in (ROOT / "benchmarks" / "rosa_train_step.py").read_text()  # benchmarks never import tests


def test_every_exported_name_exists():
    assert all(hasattr(zoo.rosa, n) for n in zoo.rosa.__all__)
    assert isinstance(zoo.rosa.MASK_FILE, str) and Path(zoo.rosa.MASK_FILE).suffix == ".safetensors"
