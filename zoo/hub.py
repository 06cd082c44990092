"""Hugging Face Hub: `HubMixin` (save_pretrained / from_pretrained) and the `zoo push` / `zoo pull` commands.

A published model is `model.safetensors` + `config.yaml` (class path and init args: enough to rebuild the
module) + `README.md` (the card). Pickled weights are never published or loaded from the Hub.
"""

from __future__ import annotations

import importlib
import json
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch
import yaml
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from zoo.checks import check_torch_file
from zoo.configs import load_yaml
from zoo.errors import ZooError, flat
from zoo.rundir import check_run_dir, newest_match

WEIGHTS = "model.safetensors"
CONFIG = "config.yaml"
CARD = "README.md"
ALIASES = "zoo_aliases"  # safetensors metadata key: {alias name: stored name} for tied tensors
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")


def _plain(v: Any) -> Any:
    """hparams to YAML-safe values."""
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, Path):
        return str(v)
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    return v


def import_class(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise ZooError(f"class {class_path!r} does not exist ({e})") from e


class HubMixin:
    """Mixin for LightningModules that call `self.save_hyperparameters()`.

    Override `card_metadata`, `hub_state_dict` or `prepare_state_dict_load` where a module needs to."""

    hub_strict: bool = True

    def card_metadata(self) -> dict[str, Any]:
        """Front-matter additions for the model card (base_model, datasets, tags, ...)."""
        return {}

    def hub_state_dict(self) -> dict[str, torch.Tensor]:
        return self.state_dict()

    def prepare_state_dict_load(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Called before `load_state_dict`, e.g. to allocate tensors whose shape depends on training."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Lightning's hook before a checkpoint's weights are loaded (resume, `zoo test --ckpt_path`, push): the same
        preparation as for Hub weights."""
        self.prepare_state_dict_load(checkpoint["state_dict"])

    def hub_config(self) -> dict[str, Any]:
        cls = type(self)
        return {"model": {"class_path": f"{cls.__module__}.{cls.__qualname__}",
                          "init_args": _plain(dict(getattr(self, "hparams", {})))}}

    def save_pretrained(self, directory: str | Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        save_state_dict(self.hub_state_dict(), directory / WEIGHTS)
        (directory / CONFIG).write_text(yaml.safe_dump(self.hub_config(), sort_keys=False))
        return directory

    @classmethod
    def from_pretrained(cls, repo_or_dir: str | Path, revision: str | None = None, endpoint: str | None = None,
                        **overrides: Any):
        """Rebuild a module from a local directory (`save_pretrained`'s, or a run dir: its last checkpoint) or a Hub
        repo (through the HF cache; works with `HF_HUB_OFFLINE=1` once cached). `overrides` replace init args."""
        return load_pretrained(repo_or_dir, revision=revision, endpoint=endpoint, expected=cls, **overrides)


def save_state_dict(state: dict[str, torch.Tensor], path: Path) -> None:
    """safetensors refuses shared storage (tied embeddings): keep one name, record the others as aliases.

    The header gets exactly one metadata key: safetensors writes several keys in no fixed order, so identical
    weights would hash differently and a re-push of the same run would make a new Hub commit."""
    seen: dict[tuple, str] = {}
    tensors, aliases = {}, {}
    for name, t in state.items():
        t = t.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if t.numel() and key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        tensors[name] = t.contiguous().cpu()
    save_file(tensors, str(path), metadata={ALIASES: json.dumps(aliases, sort_keys=True)} if aliases else
              {"format": "pt"})


def load_state_dict_file(path: Path) -> dict[str, torch.Tensor]:
    try:
        with safe_open(str(path), framework="pt") as f:
            state = {k: f.get_tensor(k) for k in f.keys()}
            aliases = json.loads((f.metadata() or {}).get(ALIASES, "{}"))
    except (SafetensorError, OSError, json.JSONDecodeError) as e:  # truncated, not safetensors, or a bad header
        raise ZooError(f"{path} is not a readable safetensors file ({e})") from e
    for name, target in aliases.items():
        state[name] = state[target]
    return state


def check_repo_id(repo: str, or_directory: bool = False) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo)
    except HFValidationError as e:
        what = "neither a local directory nor a Hub repo id" if or_directory else "not a Hub repo id"
        raise ZooError(f"{repo!r} is {what} like org/name ({e})") from e


def _is_repo_id(text: str) -> bool:
    """``org/name`` as the Hub spells a repo (not ./x, /x, x.ckpt or a glob): what a weights option that names no
    local path may mean instead."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if text.count("/") != 1 or text.startswith((".", "/", "~")) or any(c in text for c in "*?[") or \
            text.endswith((".ckpt", ".pt", ".pth", ".safetensors")):
        return False
    try:
        validate_repo_id(text)
    except HFValidationError:
        return False
    return True


def hub_errors() -> tuple[type[BaseException], ...]:
    """What a Hub call raises for a missing repo, a bad token or no connection: huggingface_hub's own errors
    (offline mode is an OSError) and its HTTP client's transport errors, which it lets through."""
    from huggingface_hub.errors import HfHubHTTPError

    errors: list[type[BaseException]] = [HfHubHTTPError, OSError]
    for client in ("httpx2", "httpx", "requests"):
        try:
            base = importlib.import_module(client)
        except ImportError:
            continue
        errors += [e for e in (getattr(base, "TransportError", None), getattr(base, "RequestException", None)) if e]
    return tuple(errors)


def _local_or_download(repo_or_dir: str | Path, revision: str | None, endpoint: str | None) -> Path:
    path = Path(repo_or_dir)
    if path.is_dir():
        return path
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    repo = str(repo_or_dir)
    check_repo_id(repo, or_directory=True)
    from huggingface_hub.constants import is_offline_mode

    if not is_offline_mode():
        from huggingface_hub import HfApi

        try:
            files = HfApi(endpoint=endpoint).list_repo_files(repo, revision=revision)
        except hub_errors() as e:
            raise ZooError(f"cannot read Hub repo {repo!r}: {flat(e)}") from e
        if WEIGHTS not in files:
            pickles = [f for f in files if f.endswith(PICKLE_SUFFIXES)]
            what = f"only pickled weights ({', '.join(pickles)})" if pickles else "no model.safetensors"
            raise ZooError(f"Hub repo {repo!r} has {what}; zoo loads safetensors only and never unpickles")
    try:
        local = snapshot_download(repo, revision=revision, endpoint=endpoint, allow_patterns=[WEIGHTS, CONFIG, CARD])
    except LocalEntryNotFoundError as e:
        raise ZooError(f"{repo!r} is not in the local HF cache and HF_HUB_OFFLINE is set; pull it first") from e
    except hub_errors() as e:
        raise ZooError(f"cannot download {repo!r}: {flat(e)}") from e
    return Path(local)


def load_pretrained(repo_or_dir: str | Path, revision: str | None = None, endpoint: str | None = None,
                    expected: type | None = None, **overrides: Any):
    """The module stored in a local dir or Hub repo (class from its config.yaml), or the module of a run dir of this
    machine (its last checkpoint, read weights-only, as `zoo push` reads it)."""
    from_hub = not Path(repo_or_dir).is_dir()
    if not from_hub and is_run_dir(Path(repo_or_dir)):
        return module_from_run(repo_or_dir, expected=expected, **overrides).eval()
    local = _local_or_download(repo_or_dir, revision, endpoint)
    pickles = [p.name for p in local.iterdir() if p.suffix in PICKLE_SUFFIXES]
    if not (local / WEIGHTS).exists():
        what = f"only pickled weights ({', '.join(pickles)})" if pickles else "no model.safetensors"
        raise ZooError(f"{repo_or_dir} has {what}; zoo loads safetensors only and never unpickles")
    if not (local / CONFIG).exists():
        raise ZooError(f"{repo_or_dir} has no {CONFIG}; cannot rebuild the module")
    cfg = load_yaml(local / CONFIG)
    if from_hub:
        check_hub_class(cfg.get("model", cfg).get("class_path"), repo_or_dir, expected)
    module = _instantiate(cfg.get("model", cfg), local / CONFIG, repo_or_dir, expected, **overrides)
    state = load_state_dict_file(local / WEIGHTS)
    module.prepare_state_dict_load(state)
    load_fitting(module, state, f"weights in {repo_or_dir}")
    return module.eval()


def state_dict_misfit(error: RuntimeError) -> list[str] | None:
    """The mismatches torch's load_state_dict lists ("Error(s) in loading state_dict for X:\n\tsize mismatch for
    ..."), or None for another RuntimeError."""
    text = str(error)
    if not text.startswith("Error(s) in loading state_dict"):
        return None
    return [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]


def load_fitting(module: torch.nn.Module, state: dict[str, torch.Tensor], what: str) -> None:
    """Load `state` into `module`, refusing in one line weights that do not fit it: a shape that differs, or (for a
    module that saves all its weights, `hub_strict`) a key missing or extra; a module that publishes part of its
    weights may lack some, never have extra ones."""
    name = type(module).__name__
    try:
        missing, unexpected = module.load_state_dict(state, strict=False)
    except RuntimeError as e:  # size mismatches raise even with strict=False (modules with their own loaders, such
        # as QRoSA's NF4 state, decide what fits)
        problems = state_dict_misfit(e)
        if problems is None:
            raise
        raise ZooError(f"{what} do not fit {name}: {problems[0] if problems else ''}") from e
    if getattr(module, "hub_strict", True) and (missing or unexpected):
        raise ZooError(f"{what} do not fit {name}: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if unexpected:
        raise ZooError(f"{what} have keys {name} lacks: {unexpected[:5]}")


def check_hub_class(class_path: Any, source: Any, expected: type | None) -> None:
    """A config downloaded from the Hub names the class to build; importing a module runs its code, so only the
    zoo's registered modules (or the very class the caller asked for) are imported from a Hub config."""
    from zoo.registry import PAPERS

    allowed = {m for p in PAPERS.values() for m in p.modules}
    if expected is not None and expected is not HubMixin:
        allowed.add(f"{expected.__module__}.{expected.__qualname__}")
    if class_path not in allowed and not _defines_a_registered_model(class_path, PAPERS):
        raise ZooError(f"{source}: its config names class {class_path!r}, which is not a model of the zoo; refusing "
                       f"to import it (load a local copy with from_pretrained(<dir>) if you trust it)")


def _defines_a_registered_model(class_path: Any, papers: dict) -> bool:
    """Whether ``class_path`` is where a registered model is defined: a pushed config names the class as Lightning
    saved it (``zoo.gentle.module.GENTLEModule``), the registry as a paper exports it (``zoo.gentle.GENTLEModule``).
    Only the paper's own registered class is imported to compare, never the path the config names."""
    parts = class_path.split(".") if isinstance(class_path, str) else []
    if len(parts) < 3 or parts[0] != "zoo" or parts[1] not in papers:
        return False
    for registered in papers[parts[1]].modules:
        if registered.rsplit(".", 1)[-1] == parts[-1]:
            cls = import_class(registered)
            return f"{cls.__module__}.{cls.__qualname__}" == class_path
    return False


def _instantiate(model_cfg: dict, config_path: Path, source: Any, expected: type | None = None, **overrides: Any):
    """The LightningModule a config's ``{class_path, init_args}`` describes (init_args updated by `overrides`)."""
    import lightning.pytorch as pl

    if "class_path" not in model_cfg:
        raise ZooError(f"{config_path} has no model.class_path")
    cls = import_class(model_cfg["class_path"])
    if not (isinstance(cls, type) and issubclass(cls, pl.LightningModule)):
        raise ZooError(f"{model_cfg['class_path']} is not a LightningModule")
    if expected is not None and expected is not HubMixin and not issubclass(cls, expected):
        raise ZooError(f"{source} holds a {cls.__name__}, not a {expected.__name__}")
    return cls(**{**(model_cfg.get("init_args") or {}), **overrides})


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """A local Lightning checkpoint, loaded weights-only (no arbitrary unpickling); it must hold a state_dict."""
    check_torch_file(Path(path))
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - any unpickling refusal means the file is not plain tensors
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")  # torch explains at length
        raise ZooError(f"checkpoint {path} cannot be loaded weights-only ({type(e).__name__}: {first})") from e
    if not isinstance(payload, dict) or "state_dict" not in payload:
        raise ZooError(f"checkpoint {path} has no state_dict")
    return payload


def resolve_weights(path: str, what: str, hint: str) -> Path:
    """The weights file that `path` names: a checkpoint file, a HubMixin directory (model.safetensors), a run
    directory (its checkpoints/last.ckpt) or a published Hub repo ``org/name`` that is no local path (its
    model.safetensors, downloaded into the HF cache, or read from it offline); a glob picks its newest match.
    `what` names the setting in errors and `hint` says how the weights are made (e.g. "run stage 1 first")."""
    p = Path(newest_match(path, what, hint))
    if not p.exists() and _is_repo_id(path):
        return _local_or_download(path, None, None) / WEIGHTS
    if p.is_dir():
        for cand in (p / WEIGHTS, p / "checkpoints" / "last.ckpt"):
            if cand.is_file():
                return cand
        raise ZooError(f"{what} {path!r} holds neither {WEIGHTS} nor checkpoints/last.ckpt")
    if not p.is_file():
        raise ZooError(f"{what} {path!r} does not exist; {hint} or fix the path")
    return p


def load_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The state dict of a file `resolve_weights` returned: safetensors, or a local Lightning checkpoint read
    weights-only."""
    path = Path(path)
    return load_state_dict_file(path) if path.suffix == ".safetensors" else load_checkpoint(path)["state_dict"]


def check_state_fits(own: dict[str, torch.Tensor], state: dict[str, torch.Tensor], what: str, hint: str = "") -> None:
    """Refuse weights that do not fit a module exactly (every weight present, none extra, same shapes), naming the
    counts and one example: a silent partial load would train or score a different model."""
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    reshaped = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or reshaped:
        raise ZooError(f"{what} does not fit this model: {len(missing)} missing, {len(unexpected)} unexpected, "
                       f"{len(reshaped)} differently shaped weights (e.g. {(reshaped or missing or unexpected)[0]})"
                       + (f"; {hint}" if hint else ""))


# -- commands ------------------------------------------------------------------------------------------

def is_run_dir(path: Path) -> bool:
    """A `zoo fit` run dir (its config and a last checkpoint), not a `save_pretrained` directory."""
    return not (path / WEIGHTS).exists() and (path / CONFIG).is_file() and \
        (path / "checkpoints" / "last.ckpt").is_file()


def module_from_run(run_dir: str | Path, checkpoint: str = "last", expected: type | None = None, **overrides: Any):
    """Rebuild a run's module from its config.yaml and a checkpoint's weights (loaded weights-only)."""
    run_dir = check_run_dir(run_dir)
    if checkpoint.endswith(".ckpt"):
        ckpt = Path(checkpoint) if Path(checkpoint).is_absolute() or Path(checkpoint).exists() else run_dir / checkpoint
    else:
        ckpt = run_dir / "checkpoints" / f"{checkpoint}.ckpt"
    if checkpoint == "best":
        best = sorted((run_dir / "checkpoints").glob("best-*.ckpt"))
        ckpt = best[-1] if best else ckpt
    if not ckpt.exists():
        raise ZooError(f"checkpoint {ckpt} does not exist")
    module = _instantiate(load_yaml(run_dir / "config.yaml").get("model") or {}, run_dir / "config.yaml", run_dir,
                          expected, **overrides)
    payload = load_checkpoint(ckpt)
    module.on_load_checkpoint(payload)  # modules whose state shape depends on training restore it here
    load_fitting(module, payload["state_dict"], f"weights in {ckpt}")
    return module


def push(run_dir: str, *, repo: str, checkpoint: str = "last", private: bool = False,
         commit_message: Optional[str] = None, endpoint: Optional[str] = None, token: Optional[str] = None) -> str:
    """Publish a run to the Hugging Face Hub: model.safetensors, config.yaml and README.md (its model card).

    The card carries the run's measured results as model-index eval results.

    Args:
        run_dir: the run directory (runs/<config>/<timestamp>).
        repo: Hub repo id, e.g. org/name (created if missing).
        checkpoint: 'last', 'best' or a path to a .ckpt inside the run.
        private: create the repo as private.
        commit_message: commit message (default names the run).
        endpoint: Hub endpoint (default: HF_ENDPOINT or huggingface.co).
        token: Hub token (default: the logged-in token).
    """
    from huggingface_hub import HfApi

    from zoo.cards import render_card

    check_repo_id(repo)
    module = module_from_run(run_dir, checkpoint)
    api = HfApi(endpoint=endpoint, token=token)
    with tempfile.TemporaryDirectory() as tmp:
        module.save_pretrained(tmp)
        (Path(tmp) / CARD).write_text(render_card(run_dir))
        try:
            api.create_repo(repo, private=private, exist_ok=True)
            info = api.upload_folder(repo_id=repo, folder_path=tmp,
                                     commit_message=commit_message or f"zoo push {Path(run_dir).name}")
        except hub_errors() as e:  # nothing is lost: the run dir is untouched, push again when the Hub answers
            raise ZooError(f"cannot push to Hub repo {repo!r}: {flat(e)}") from e
    url = getattr(info, "commit_url", None) or str(info)
    print(url)
    return url


def pull(repo: str, revision: Optional[str] = None, endpoint: Optional[str] = None) -> str:
    """Download a published model (safetensors, config, card) into the local HF cache and check it loads.

    Args:
        repo: Hub repo id, e.g. org/name.
        revision: branch, tag or commit.
        endpoint: Hub endpoint (default: HF_ENDPOINT or huggingface.co).
    """
    local = _local_or_download(repo, revision, endpoint)
    check_hub_class(load_yaml(local / CONFIG).get("model", {}).get("class_path"), repo, None)
    load_pretrained(local)
    print(local)
    return str(local)
