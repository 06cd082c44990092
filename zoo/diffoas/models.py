"""Neural operators of the paper's experiments (Appendix B.1): FNO and DeepONet, plus the relative L2 error.

* FNO comes from the `neuraloperator` library (it installs without touching torch). The paper uses the FNO of
  Li et al. (2021): 4 Fourier layers, 12 modes, width 32, a grid positional embedding, a linear skip per layer,
  a lifting to the width and a projection through 128 channels. We configure `neuralop.models.FNO` to that layout
  (``use_channel_mlp=False``, ``fno_skip='linear'``, projection ratio 4) instead of the library's defaults.
* DeepONet (Lu et al., 2021): branch net on the flattened input fields, trunk net on the (x, y) coordinates, both
  12 tanh layers of width 50 (B.1), output ``sum_k b_k t_k + b_0``. Written here: it is a few lines.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.errors import ZooError


def relative_l2(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Per-sample ||pred - target||_2 / ||target||_2 over all but the batch dimension (the paper's metric)."""
    diff = (pred - target).flatten(1).norm(dim=1)
    return diff / target.flatten(1).norm(dim=1).clamp_min(eps)


def _neuralop_fno():
    from neuralop.models import FNO

    class PlainStateFNO(FNO):
        """neuralop's FNO stores an extra ``_metadata`` dict (with Python objects) at the *root* of any state dict
        it is part of; that breaks safetensors export and strict loading of the enclosing LightningModule. Use
        torch's plain state-dict methods instead (the architecture is rebuilt from our own hparams)."""

        state_dict = nn.Module.state_dict
        load_state_dict = nn.Module.load_state_dict

    return PlainStateFNO


def build_fno(in_channels: int, out_channels: int = 1, modes: int = 12, width: int = 32, n_layers: int = 4,
              projection_ratio: float = 4.0, domain_padding: float | None = None) -> nn.Module:
    FNO = _neuralop_fno()
    return FNO(
        # Li et al.'s `modes=12` keeps wavenumbers 0..11 and -12..-1 along x and 0..11 along the rfft axis y;
        # neuralop counts modes centred over both signs and keeps n//2 + 1 on the rfft axis, hence (2m, 2m - 1).
        n_modes=(2 * modes, 2 * modes - 1),
        in_channels=in_channels,  # the grid embedding adds the 2 coordinate channels, as Li et al.
        out_channels=out_channels,
        hidden_channels=width,
        n_layers=n_layers,
        lifting_channel_ratio=0,  # 0 -> a single linear lift, like fc0 of Li et al.
        projection_channel_ratio=projection_ratio,  # 32 -> 128 -> 1 as fc1/fc2 of Li et al.
        positional_embedding="grid",
        use_channel_mlp=False,
        fno_skip="linear",
        domain_padding=domain_padding,
    )


def _mlp(sizes: list[int], act=nn.Tanh, last_act: bool = False) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(act())
    return nn.Sequential(*layers)


class DeepONet(nn.Module):
    """Unstacked DeepONet on a fixed s x s grid: ``G(v)(y) = sum_k branch(v)_k * trunk(y)_k + b0``."""

    def __init__(self, in_channels: int, grid_size: int, width: int = 50, depth: int = 12):
        super().__init__()
        self.grid_size = grid_size
        self.branch = _mlp([in_channels * grid_size**2] + [width] * depth)
        self.trunk = _mlp([2] + [width] * depth, last_act=True)  # trunk ends in the activation (Lu et al.)
        self.bias = nn.Parameter(torch.zeros(1))
        x = torch.linspace(0, 1, grid_size)
        coords = torch.stack(torch.meshgrid(x, x, indexing="ij"), dim=-1).reshape(-1, 2)
        self.register_buffer("coords", coords, persistent=False)

    def forward(self, v: torch.Tensor) -> torch.Tensor:  # v: (B, C, s, s) -> (B, 1, s, s)
        b = self.branch(v.flatten(1))  # (B, p)
        t = self.trunk(self.coords)  # (s*s, p)
        out = b @ t.T + self.bias
        return out.view(v.shape[0], 1, self.grid_size, self.grid_size)


def build_model(name: str, in_channels: int, grid_size: int, **kw) -> nn.Module:
    if name == "fno":
        return build_fno(in_channels, **kw)
    if name == "deeponet":
        return DeepONet(in_channels, grid_size, **kw)
    raise ZooError(f"unknown neural operator {name!r}: choose 'fno' or 'deeponet'")
