"""Loading the official MOMENT checkpoints (``AutonLab/MOMENT-1-{small,base,large}``) into `MOMENT`.

A checkpoint is the official repo's ``config.json`` (MOMENT's fields plus an inline ``t5_config``) and
``model.safetensors`` with momentfm's state-dict names. They are read through ``huggingface_hub`` (its cache:
``HF_HUB_OFFLINE=1`` works once a repo is cached), mapped onto ours with `MOMENTFM_KEY_TABLE`, and loaded
strictly: every checkpoint tensor must map, and only a task head the checkpoint lacks may stay missing. A repo or
revision that offers only pickled weights (``pytorch_model.bin``) is refused: nothing here unpickles.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from zoo.errors import ZooError
from zoo.moment.embedding import sinusoidal_positions
from zoo.moment.model import MOMENT, MomentConfig

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
PICKLES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
CHECKPOINTS = ("AutonLab/MOMENT-1-small", "AutonLab/MOMENT-1-base", "AutonLab/MOMENT-1-large")

# momentfm state-dict name (regex) -> ours (template); every key of a checkpoint must match one row.
# ``None``: a derived tensor that is checked against ours and not loaded.
MOMENTFM_KEY_TABLE: tuple[tuple[str, str | None], ...] = (
    (r"patch_embedding\.value_embedding\.(weight|bias)", r"patch_embedding.projection.\1"),
    (r"patch_embedding\.mask_embedding", r"patch_embedding.mask_embedding"),
    (r"patch_embedding\.position_embedding\.pe", None),  # sinusoidal table [1, 5000, D]: recomputed
    (r"encoder\.(.+)", r"encoder.\1"),  # the T5 encoder stack, names unchanged
    (r"head\.linear\.(weight|bias)", r"head.linear.\1"),
)

# config.json fields we read; the rest (device, model_name, transformer_backbone, ...) does not shape the model
_CONFIG_FIELDS = ("seq_len", "patch_len", "add_positional_embedding", "value_embedding_bias", "orth_gain")


def map_key(name: str) -> tuple[bool, str | None]:
    """(matched, our name or None for a derived tensor)."""
    for pattern, target in MOMENTFM_KEY_TABLE:
        if re.fullmatch(pattern, name):
            return True, None if target is None else re.sub(pattern, target, name)
    return False, None


def convert_momentfm_state_dict(state: dict[str, torch.Tensor], model: MOMENT,
                                source_task: str = "reconstruction") -> dict[str, torch.Tensor]:
    """momentfm's state dict -> ours for ``model``. A head trained for another task than ``model``'s (the released
    checkpoints carry the reconstruction head) is left out; unmapped keys are an error that lists them."""
    out: dict[str, torch.Tensor] = {}
    unmapped = []
    for name, tensor in state.items():
        matched, ours = map_key(name)
        if not matched:
            unmapped.append(name)
            continue
        if name == "patch_embedding.position_embedding.pe":
            n, d = model.config.n_patches, model.config.d_model
            ref = sinusoidal_positions(n, d)
            if tuple(tensor.shape[-1:]) != (d,) or not torch.allclose(tensor.reshape(-1, d)[:n].float(), ref, atol=1e-5):
                raise ZooError("the checkpoint's positional embedding is not the sinusoidal table MOMENT uses")
            if not model.config.add_positional_embedding:
                raise ZooError("the checkpoint holds a positional embedding but its config sets "
                               "add_positional_embedding: false")
            continue
        if ours.startswith("head.") and source_task != model.config.task_name:
            continue  # another task's head: ours starts from its initialisation
        out[ours] = tensor
    if unmapped:
        raise ZooError(f"{len(unmapped)} checkpoint key(s) do not map onto MOMENT: {', '.join(unmapped[:8])}")
    return out


def load_converted(model: MOMENT, state: dict[str, torch.Tensor], what: str) -> MOMENT:
    """Strict load: nothing unexpected, nothing missing except the task head, no shape mismatch."""
    own = model.state_dict()
    unexpected = [k for k in state if k not in own]
    reshaped = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in state
                if k in own and state[k].shape != own[k].shape]
    missing = [k for k in own if k not in state and not k.startswith("head.")]
    if unexpected or reshaped or missing:
        raise ZooError(f"{what} does not fit MOMENT: unexpected {unexpected[:5]}, missing {missing[:5]}, "
                       f"differently shaped {reshaped[:3]}")
    model.load_state_dict(state, strict=False)
    return model


def config_from_json(cfg: dict[str, Any], **task: Any) -> MomentConfig:
    """A `MomentConfig` from an official config.json plus task fields (task_name, forecast_horizon, ...)."""
    if not isinstance(cfg.get("t5_config"), dict):
        raise ZooError("the MOMENT config has no t5_config (the official config.json inlines it)")
    if cfg.get("revin_affine"):
        raise ZooError("revin_affine: true is not supported (the released MOMENT checkpoints use no affine RevIN)")
    if cfg.get("transformer_type", "encoder_only") != "encoder_only":
        raise ZooError(f"transformer_type {cfg['transformer_type']!r} is not supported: MOMENT is encoder-only")
    stride = cfg.get("patch_stride_len", cfg.get("patch_len", 8))
    if stride != cfg.get("patch_len", 8):
        raise ZooError(f"patch_stride_len {stride} differs from patch_len {cfg.get('patch_len')}: MOMENT's patches "
                       "are disjoint")
    t5 = dict(cfg["t5_config"])
    if cfg.get("d_model") not in (None, t5.get("d_model")):
        raise ZooError(f"config d_model {cfg['d_model']} differs from t5_config d_model {t5.get('d_model')}")
    fields = {k: cfg[k] for k in _CONFIG_FIELDS if cfg.get(k) is not None}
    return MomentConfig(t5_config=t5, **fields, **{k: v for k, v in task.items() if v is not None})


def _repo_files(repo_id: str, revision: str | None) -> tuple[Path, Path]:
    """config.json and model.safetensors of a local directory or a Hub repo, through the HF cache."""
    local = Path(repo_id)
    if local.is_dir():
        files = [p.name for p in local.iterdir()]
        folder = local
    else:
        from huggingface_hub import HfApi, hf_hub_download, try_to_load_from_cache
        from huggingface_hub.constants import is_offline_mode
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

        if not is_offline_mode():
            try:
                files = HfApi().list_repo_files(repo_id, revision=revision)
            except HfHubHTTPError as e:
                raise ZooError(f"cannot read Hub repo {repo_id!r}: {e}") from e
            _refuse_pickles(repo_id, files)
        else:
            cached = try_to_load_from_cache(repo_id, WEIGHTS_FILE, revision=revision)
            if not isinstance(cached, str):
                raise ZooError(f"{repo_id!r} ({WEIGHTS_FILE}) is not in the local HF cache and HF_HUB_OFFLINE is set; "
                               f"download it once with network access (huggingface-cli download {repo_id})")
        try:
            paths = [Path(hf_hub_download(repo_id, f, revision=revision)) for f in (CONFIG_FILE, WEIGHTS_FILE)]
        except LocalEntryNotFoundError as e:
            raise ZooError(f"{repo_id!r} is not in the local HF cache and the Hub cannot be reached: {e}") from e
        except HfHubHTTPError as e:
            raise ZooError(f"cannot download {repo_id!r}: {e}") from e
        return paths[0], paths[1]
    _refuse_pickles(repo_id, files)
    if CONFIG_FILE not in files:
        raise ZooError(f"{repo_id} has no {CONFIG_FILE}: not a MOMENT checkpoint")
    return folder / CONFIG_FILE, folder / WEIGHTS_FILE


def _refuse_pickles(repo_id: str, files: list[str]) -> None:
    if WEIGHTS_FILE not in files:
        pickles = [f for f in files if f.endswith(PICKLES)]
        what = f"only pickled weights ({', '.join(pickles)})" if pickles else f"no {WEIGHTS_FILE}"
        raise ZooError(f"{repo_id!r} has {what}; MOMENT weights are loaded from safetensors only, never unpickled")


def load_moment(repo_id: str, task_name: str = "reconstruction", revision: str | None = None,
                **task: Any) -> MOMENT:
    """MOMENT with the weights of an official checkpoint (Hub id or local directory) for ``task_name``."""
    config_path, weights_path = _repo_files(repo_id, revision)
    try:
        cfg = json.loads(Path(config_path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ZooError(f"cannot read {config_path}: {e}") from e
    model = MOMENT(config_from_json(cfg, task_name=task_name, **task))
    state = load_file(str(weights_path))
    source_task = cfg.get("task_name", "reconstruction")
    source_task = "reconstruction" if source_task in ("pre-training", "pretraining") else source_task
    return load_converted(model, convert_momentfm_state_dict(state, model, source_task), f"checkpoint {repo_id}")
