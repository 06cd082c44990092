"""Encoders for SCoRe: timm ResNets (optionally with a CIFAR stem), a CIFAR ResNet-32, a tiny CNN.

Every encoder maps images to a pooled feature vector; `SCoReNet` adds the normalised projection head
(SupCon's 2-layer MLP to 128-d) used by the stage-1 objective and a linear classifier for stage 2.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.errors import ZooError


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class CifarResNet(nn.Module):
    """He et al.'s CIFAR ResNet (6n+2 layers, widths 16/32/64 x width): ResNet-32 is n=5.

    timm has no CIFAR ResNet-32, which the GLMC long-tail recipe of SCoRe uses.
    """

    def __init__(self, depth: int = 32, in_chans: int = 3, width: int = 1):
        super().__init__()
        if (depth - 2) % 6:
            raise ZooError(f"CIFAR ResNet depth must be 6n+2 (20, 32, 44, 56, 110), got {depth}")
        n = (depth - 2) // 6
        w = [16 * width, 32 * width, 64 * width]
        self.stem = nn.Sequential(nn.Conv2d(in_chans, w[0], 3, 1, 1, bias=False), nn.BatchNorm2d(w[0]), nn.ReLU())
        layers, cin = [], w[0]
        for i, cout in enumerate(w):
            for j in range(n):
                layers.append(_BasicBlock(cin, cout, 2 if (i > 0 and j == 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.num_features = cin

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


class TinyCNN(nn.Module):
    """Two conv blocks and a 2x2 pooled map (keeps coarse layout): the CPU reproduction's small network."""

    def __init__(self, in_chans: int = 3, width: int = 16):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_chans, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(width, 2 * width, 3, padding=1, bias=False), nn.BatchNorm2d(2 * width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(2), nn.Flatten())
        self.num_features = 8 * width

    def forward(self, x):
        return self.net(x)


def build_encoder(name: str, in_chans: int = 3, cifar_stem: bool = True, width: int = 1) -> nn.Module:
    """"resnet32_cifar" (also resnet20/44/56/110_cifar), "tiny_cnn", or any timm model name.

    timm models are built without a classifier and with random weights (no download). With
    ``cifar_stem`` a timm ResNet gets SupCon's CIFAR stem: a 3x3 stride-1 first conv and no max-pool.
    """
    if name.endswith("_cifar") and name.startswith("resnet"):
        return CifarResNet(int(name[len("resnet"):-len("_cifar")]), in_chans, width)
    if name == "tiny_cnn":
        return TinyCNN(in_chans, 16 * width)
    import timm

    if not timm.is_model(name):
        raise ZooError(f"unknown encoder {name!r}: not 'resnet32_cifar', 'tiny_cnn' or a timm model name")
    model = timm.create_model(name, pretrained=False, num_classes=0, in_chans=in_chans)
    if cifar_stem and hasattr(model, "conv1") and hasattr(model, "maxpool"):
        model.conv1 = nn.Conv2d(in_chans, model.conv1.out_channels, 3, 1, 1, bias=False)
        model.maxpool = nn.Identity()
    return model


class SCoReNet(nn.Module):
    """Encoder + L2-normalised MLP projection head (stage 1) + linear classifier (stage 2)."""

    def __init__(self, encoder: str, num_classes: int, in_chans: int = 3, proj_dim: int = 128,
                 cifar_stem: bool = True, width: int = 1):
        super().__init__()
        self.encoder = build_encoder(encoder, in_chans, cifar_stem, width)
        d = self.encoder.num_features
        self.head = nn.Sequential(nn.Linear(d, d), nn.ReLU(inplace=True), nn.Linear(d, proj_dim))
        self.classifier = nn.Linear(d, num_classes)

    def project(self, h: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.head(h), dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.encoder(x))
