"""Small helpers over resolved configs: loading YAML and flattening to dotted keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from zoo.errors import ZooError


def read_yaml(path: str | Path, what: str = "") -> Any:
    """A YAML file's content, whatever its type; a syntax or encoding error is a one-line error naming the line
    (``what``, e.g. "config file ", goes in front of the path)."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        mark = getattr(e, "problem_mark", None)
        raise ZooError(f"{what}{path} is not valid YAML" + (f" (line {mark.line + 1})" if mark else f" ({e})")) from e


def load_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML mapping the zoo wrote or reads (a run's config.yaml, a Hub repo's); anything else reads as {}."""
    data = read_yaml(path)
    return data if isinstance(data, dict) else {}


def flatten(cfg: dict[str, Any] | str, prefix: str = "") -> dict[str, Any]:
    """{"model": {"init_args": {"r": 16}}} -> {"model.r": 16}; `init_args` levels are dropped,
    `class_path` stays as the key of its parent (e.g. "model" -> "zoo.rosa.RoSAModule")."""
    if isinstance(cfg, str):
        cfg = yaml.safe_load(cfg) or {}
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if k == "init_args" and isinstance(v, dict):
            out.update(flatten(v, prefix))
        elif k == "class_path":
            out[prefix or "class_path"] = v
        elif isinstance(v, dict) and v:
            out.update(flatten(v, key))
        elif isinstance(v, list) and any(isinstance(x, dict) for x in v):
            for i, x in enumerate(v):
                if isinstance(x, dict):
                    out.update(flatten(x, f"{key}.{i}"))
                else:
                    out[f"{key}.{i}"] = x
        else:
            out[key] = v
    return out
