"""`zoo push` / `zoo pull` / HubMixin against a loopback Hub (tests/hub_server.py) and the real huggingface_hub client.

Nothing here reaches the internet: the server listens on 127.0.0.1, the HF cache and token live in tmp_path, and
tests/conftest.py refuses non-loopback sockets.
"""

from __future__ import annotations

import importlib.util
import os
import re
import socket
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from zoo.errors import ZooError
from zoo_toy import ToyRegressor  # tests/support, on sys.path through tests/conftest.py

_SERVER_PATH = Path(__file__).resolve().parents[1] / "hub_server.py"


def _hub_server_module():
    name = "zoo_tests_hub_server"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, _SERVER_PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up here
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture
def hf_home(tmp_path, monkeypatch) -> Path:
    """A private HF home/cache/token, online mode on (tests/conftest.py sets HF_HUB_OFFLINE=1 at import).

    huggingface_hub reads its environment once, into `huggingface_hub.constants`, at import: patch those
    attributes (the library reads them from the module at call time), and the environment for subprocesses."""
    from huggingface_hub import constants

    home = tmp_path / "hf_home"
    paths = {"HF_HOME": home, "HF_HUB_CACHE": home / "hub", "HF_ASSETS_CACHE": home / "assets",
             "HF_XET_CACHE": home / "xet", "HF_TOKEN_PATH": home / "token"}
    for name, path in paths.items():
        monkeypatch.setenv(name, str(path))
        monkeypatch.setattr(constants, name, str(path))
    monkeypatch.setattr(constants, "HUGGINGFACE_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "stored_tokens"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    # Writes need a token, as on the Hub; the server accepts any. No OIDC exchange, no user token file.
    monkeypatch.setenv("HF_TOKEN", "hf_zoo_loopback_test_token")
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    return home


@pytest.fixture
def hub(hf_home):
    """A running loopback Hub; stopped (port closed, open connections cut) after the test."""
    server = _hub_server_module().HubServer(page_size=2).start()  # small pages: the client must paginate
    try:
        yield server
    finally:
        server.stop()
    assert not server.unhandled, f"client used endpoints the test Hub lacks: {server.unhandled}"
    assert not server.errors, "\n".join(server.errors)


def _state(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


# -- the server itself, through the real client ----------------------------------------------------------

def test_server_speaks_hub_api(hub, tmp_path):
    from huggingface_hub import HfApi, hf_hub_download, snapshot_download
    from huggingface_hub.errors import (HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError,
                                       RevisionNotFoundError)

    api = HfApi(endpoint=hub.endpoint)
    url = api.create_repo("org/r", exist_ok=True)
    assert url.repo_id == "org/r"
    api.create_repo("org/r", exist_ok=True)  # 409 -> fine
    first = api.upload_file(path_or_fileobj=b"a", path_in_repo="a.txt", repo_id="org/r")
    api.upload_file(path_or_fileobj=b"b", path_in_repo="sub/dir/b.txt", repo_id="org/r")
    api.upload_file(path_or_fileobj=b"c", path_in_repo="sub/c.txt", repo_id="org/r")
    # unchanged file: the client skips the empty commit (preupload answers the remote oid)
    same = api.upload_file(path_or_fileobj=b"c", path_in_repo="sub/c.txt", repo_id="org/r")
    info = api.model_info("org/r")
    assert same.oid == info.sha
    assert {s.rfilename for s in info.siblings} == {".gitattributes", "a.txt", "sub/dir/b.txt", "sub/c.txt"}
    assert sorted(api.list_repo_files("org/r")) == [".gitattributes", "a.txt", "sub/c.txt", "sub/dir/b.txt"]
    top = {e.path for e in api.list_repo_tree("org/r")}
    assert top == {".gitattributes", "a.txt", "sub"}
    assert {e.path for e in api.list_repo_tree("org/r", path_in_repo="sub")} == {"sub/c.txt", "sub/dir"}
    # old revisions stay readable; tip moved on
    assert api.list_repo_files("org/r", revision=first.oid) == [".gitattributes", "a.txt"]
    path = hf_hub_download("org/r", "sub/dir/b.txt", endpoint=hub.endpoint)
    assert Path(path).read_bytes() == b"b"
    snap = Path(snapshot_download("org/r", endpoint=hub.endpoint))
    assert (snap / "a.txt").read_bytes() == b"a" and snap.name == info.sha
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("org/missing")
    with pytest.raises(HfHubHTTPError) as denied:  # writes need a token, as on the Hub
        HfApi(endpoint=hub.endpoint, token=False).create_repo("org/anon")
    assert denied.value.response.status_code == 401 and "org/anon" not in hub.store.repos
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/r", revision="nope")
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download("org/r", "missing.txt", endpoint=hub.endpoint)


def test_lfs_style_redirect_download(hf_home):
    """Files served like Hub LFS files (302 to another origin, X-Linked-Etag/Size) still download."""
    from huggingface_hub import HfApi, hf_hub_download

    with _hub_server_module().HubServer(lfs_redirect=True) as server:
        api = HfApi(endpoint=server.endpoint)
        api.create_repo("org/lfs")
        api.upload_file(path_or_fileobj=b"\x00" * 1000, path_in_repo="w.safetensors", repo_id="org/lfs")
        entry = next(e for e in api.list_repo_tree("org/lfs") if e.path == "w.safetensors")
        assert entry.lfs is not None and entry.lfs.size == 1000
        local = hf_hub_download("org/lfs", "w.safetensors", endpoint=server.endpoint)
        assert Path(local).read_bytes() == b"\x00" * 1000
        assert ("GET", f"/cdn/{entry.lfs.sha256}") in server.log
        assert not server.unhandled


# -- 1. train -> push -> pull -> from_pretrained, then offline from the cache ----------------------------

def test_push_pull_from_pretrained_end_to_end(in_tmp, toy_config, hub, monkeypatch, capsys):
    from huggingface_hub import HfApi, ModelCard, constants

    from zoo.cli import main
    from zoo.hub import module_from_run
    from zoo.rundir import read_summary

    monkeypatch.setenv("WANDB_MODE", "disabled")  # W&B adds seconds and nothing here
    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1"]) == 0
    (run_dir,) = list((in_tmp / "runs" / "toy").iterdir())
    # a test stage in the same run dir gives the run its final (test) metrics, which the card publishes
    assert main(["test", "--config", str(toy_config), "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt")]) == 0
    summary = read_summary(run_dir)
    assert "test/mse" in summary["test"]
    trained = _state(module_from_run(run_dir))
    capsys.readouterr()

    assert main(["push", str(run_dir), "--repo", "org/toy", "--endpoint", hub.endpoint]) == 0
    out = capsys.readouterr().out
    files = hub.files("org/toy")
    assert {"model.safetensors", "config.yaml", "README.md"} <= set(files)
    assert not [f for f in files if f.endswith((".bin", ".pt", ".ckpt", ".pkl"))]
    assert f"{hub.endpoint}/org/toy/commit/" in out
    card = ModelCard(files["README.md"].decode())
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results == {"mse": round(float(summary["test"]["test/mse"]), 6)}  # readable name, split apart
    assert [r.dataset_split for r in card.data.eval_results] == ["test"]
    assert card.data.base_model is None and not card.data.datasets  # a random-init toy on generated data
    assert "model-index" in files["README.md"].decode()
    assert "toy" in card.data.tags
    info = HfApi(endpoint=hub.endpoint).model_info("org/toy")  # the Hub's view of the card
    assert [(r.metric_type, r.metric_value) for r in info.card_data.eval_results] == list(results.items())

    # pushing the same run again changes nothing: no new commit
    before = HfApi(endpoint=hub.endpoint).model_info("org/toy").sha
    first = hub.files("org/toy")
    assert main(["push", str(run_dir), "--repo", "org/toy", "--endpoint", hub.endpoint]) == 0
    second = hub.files("org/toy")
    changed = sorted(k for k in set(first) | set(second) if first.get(k) != second.get(k))
    assert not changed, f"a second push of the same run changed {changed}"
    assert HfApi(endpoint=hub.endpoint).model_info("org/toy").sha == before

    # `zoo pull` imports only the zoo's own model classes from a downloaded config (importing runs code)
    capsys.readouterr()
    assert main(["pull", "org/toy", "--endpoint", hub.endpoint]) == 2
    assert "not a model of the zoo; refusing to import it" in capsys.readouterr().err
    from huggingface_hub import snapshot_download

    local = Path(snapshot_download("org/toy", endpoint=hub.endpoint, allow_patterns=["*.safetensors", "*.yaml", "*.md"]))
    assert local.is_dir() and Path(constants.HF_HUB_CACHE) in local.parents
    assert {p.name for p in local.iterdir()} == {"model.safetensors", "config.yaml", "README.md"}

    model = ToyRegressor.from_pretrained("org/toy", endpoint=hub.endpoint)
    assert isinstance(model, ToyRegressor) and model.hparams.hidden == 8 and not model.training
    _assert_same_weights(trained, _state(model))
    # before any push: the run dir itself (its last checkpoint, read weights-only), for the same class only
    local = ToyRegressor.from_pretrained(run_dir)
    assert isinstance(local, ToyRegressor) and not local.training
    _assert_same_weights(trained, _state(local))
    from zoo.rosa import RoSAModule

    with pytest.raises(ZooError, match="holds a ToyRegressor, not a RoSAModule"):
        RoSAModule.from_pretrained(run_dir)

    # offline, server stopped: from the HF cache
    port = hub.port
    hub.stop()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    n_requests = len(hub.log)
    offline = ToyRegressor.from_pretrained("org/toy")
    _assert_same_weights(trained, _state(offline))
    assert len(hub.log) == n_requests
    with pytest.raises(ZooError, match="not in the local HF cache"):
        ToyRegressor.from_pretrained("org/never-pulled")


def test_zoo_pull_of_a_zoo_model_then_offline_use(in_tmp, hub, monkeypatch, capsys):
    """README: `zoo pull org/name` downloads a published zoo model into the HF cache and checks it loads; it (and
    `from_pretrained`) then works with HF_HUB_OFFLINE=1. A real module of the zoo: GENTLE's smoke run."""
    from huggingface_hub import constants

    from zoo.cli import main
    from zoo.gentle import GENTLEModule

    smoke = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "gentle_toy1.yaml"
    assert main(["fit", "--config", str(smoke), "--wandb_mode", "disabled", "--trainer.max_epochs", "1"]) == 0
    (run_dir,) = Path("runs/gentle_toy1").iterdir()
    trained = _state(GENTLEModule.from_pretrained(run_dir))
    assert main(["push", str(run_dir), "--repo", "org/gentle", "--endpoint", hub.endpoint]) == 0
    capsys.readouterr()
    assert main(["pull", "org/gentle", "--endpoint", hub.endpoint]) == 0
    local = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert Path(constants.HF_HUB_CACHE) in local.parents
    assert {"model.safetensors", "config.yaml", "README.md"} <= {p.name for p in local.iterdir()}

    hub.stop()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    n_requests = len(hub.log)
    assert main(["pull", "org/gentle"]) == 0  # from the cache
    assert Path(capsys.readouterr().out.strip().splitlines()[-1]) == local
    model = GENTLEModule.from_pretrained("org/gentle")
    assert isinstance(model, GENTLEModule) and not model.training
    _assert_same_weights(trained, _state(model))

    # "point a config at it": --weights org/gentle evaluates the published weights with a config (offline, from the
    # cache) and scores what the run's own checkpoint scores; the card names them as what the run used
    import json

    test = ["test", "--config", str(smoke), "--wandb_mode", "disabled"]
    assert main([*test, "--ckpt_path", str(run_dir / "checkpoints" / "last.ckpt")]) == 0
    assert main([*test, "--weights", "org/gentle"]) == 0
    (published,) = [d for d in Path("runs/gentle_toy1").iterdir() if d != run_dir]
    want, got = (json.loads((d / "summary.json").read_text())["test"] for d in (run_dir, published))
    assert want == pytest.approx(got, rel=1e-6) and "test/wd" in got
    assert "base_model: org/gentle" in (published / "README.md").read_text()
    cwgan = Path(__file__).resolve().parents[2] / "configs" / "smoke" / "gentle_toy1_cwgan.yaml"
    capsys.readouterr()
    assert main(["test", "--config", str(cwgan), "--wandb_mode", "disabled", "--weights", "org/gentle"]) == 2
    assert "zoo: error: --weights org/gentle holds a GENTLEModule, but this config builds a CWGANModule" in \
        capsys.readouterr().err
    # init_from (IML, unlearning, pcdenoiser) reads a published repo the same way
    from zoo.hub import resolve_weights

    assert resolve_weights("org/gentle", "init_from", "run stage 1 first") == local / "model.safetensors"
    assert len(hub.log) == n_requests


@pytest.mark.parametrize("text, repo", [("org/name", True), ("runs/x", True), ("./org/name", False),
                                        ("/abs/path", False), ("runs/*/last.ckpt", False), ("dir/last.ckpt", False),
                                        ("name", False), ("a/b/c", False), ("org/na me", False)])
def test_which_missing_weights_paths_are_read_as_hub_repos(text, repo):
    # a path that exists locally is always read as one (resolve_weights looks there first)
    from zoo.hub import _is_repo_id

    assert _is_repo_id(text) is repo


def test_a_hub_config_cannot_make_zoo_import_an_arbitrary_module(hub, tmp_path, monkeypatch, capsys):
    """A downloaded config.yaml names the class to build; the class's module is imported only when it is one of
    the zoo's registered models (importing a module runs its code)."""
    from huggingface_hub import HfApi
    from safetensors.torch import save_file

    from zoo.cli import main

    marker = tmp_path / "imported"
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "side_effect_mod.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass M: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    repo = tmp_path / "repo"
    repo.mkdir()
    save_file({"w": torch.zeros(1)}, str(repo / "model.safetensors"))
    (repo / "config.yaml").write_text("model:\n  class_path: side_effect_mod.M\n  init_args: {}\n")
    api = HfApi(endpoint=hub.endpoint)
    api.create_repo("org/evil", exist_ok=True)
    api.upload_folder(repo_id="org/evil", folder_path=str(repo))
    assert main(["pull", "org/evil", "--endpoint", hub.endpoint]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "'side_effect_mod.M', which is not a model of the zoo; refusing to import it" in err
    with pytest.raises(ZooError, match="not a model of the zoo"):
        ToyRegressor.from_pretrained("org/evil", endpoint=hub.endpoint)
    assert not marker.exists() and "side_effect_mod" not in sys.modules


def test_every_registered_model_passes_where_it_is_defined():
    """What save_pretrained writes for each registered model (its class where it is defined) passes the Hub check:
    `zoo pull` of any published zoo model used to be refused."""
    from zoo.hub import check_hub_class, import_class
    from zoo.registry import PAPERS

    for registered in (m for p in PAPERS.values() for m in p.modules):
        cls = import_class(registered)
        check_hub_class(f"{cls.__module__}.{cls.__qualname__}", registered, None)


@pytest.mark.parametrize("class_path", [
    "zoo.gentle.evil.GENTLEModule",  # a paper's package, the registered name, but not where that class is defined
    "zoo.gentle.nets.MLPM",  # a class of the paper, but not a registered model
    "zoo.evil.GENTLEModule",  # no such paper
    "zoo.gentle.module.GENTLEModule.extra",
])
def test_only_where_a_registered_model_is_defined_passes_for_it(class_path):
    """A pushed config names the class where Lightning found it (zoo.gentle.module.GENTLEModule): that passes as the
    registered zoo.gentle.GENTLEModule (tested end to end above), and nothing else under zoo/ does."""
    from zoo.hub import check_hub_class

    check_hub_class("zoo.gentle.module.GENTLEModule", "org/x", None)
    with pytest.raises(ZooError, match="not a model of the zoo"):
        check_hub_class(class_path, "org/x", None)
    assert "zoo.evil" not in sys.modules and "zoo.gentle.evil" not in sys.modules


# -- 2. pickled weights are refused ---------------------------------------------------------------------

def test_from_pretrained_refuses_pickled_weights(hub, tmp_path):
    import yaml
    from huggingface_hub import HfApi

    api = HfApi(endpoint=hub.endpoint)
    api.create_repo("org/pickled")
    weights = tmp_path / "pytorch_model.bin"
    torch.save(ToyRegressor(hidden=4).state_dict(), weights)
    api.upload_file(path_or_fileobj=str(weights), path_in_repo="pytorch_model.bin", repo_id="org/pickled")
    with pytest.raises(ZooError, match=r"pickled weights \(pytorch_model.bin\)"):
        ToyRegressor.from_pretrained("org/pickled", endpoint=hub.endpoint)
    # even next to a config that would rebuild the module
    config = {"model": {"class_path": "zoo_toy.ToyRegressor", "init_args": {"hidden": 4}}}
    api.upload_file(path_or_fileobj=yaml.safe_dump(config).encode(), path_in_repo="config.yaml", repo_id="org/pickled")
    with pytest.raises(ZooError, match="pickled weights"):
        ToyRegressor.from_pretrained("org/pickled", endpoint=hub.endpoint)
    # nothing pickled was downloaded
    assert not any(p.name.endswith(".bin") for p in Path(tmp_path / "hf_home").rglob("*"))
    with pytest.raises(ZooError, match="cannot read Hub repo 'org/missing'"):
        ToyRegressor.from_pretrained("org/missing", endpoint=hub.endpoint)


# -- 3. local save_pretrained / from_pretrained -------------------------------------------------------

class TiedToy(ToyRegressor):
    """Two Linear layers sharing one weight (like tied embeddings); importable as test_hub.TiedToy."""

    def __init__(self, hidden: int = 4, **kw):
        super().__init__(hidden=hidden, **kw)
        self.enc = nn.Linear(hidden, hidden, bias=False)
        self.dec = nn.Linear(hidden, hidden, bias=False)
        self.dec.weight = self.enc.weight


def test_save_pretrained_round_trip(tmp_path):
    from safetensors import safe_open

    from zoo.hub import HubMixin, load_pretrained

    torch.manual_seed(0)
    model = ToyRegressor(hidden=5, lr=0.3)
    out = model.save_pretrained(tmp_path / "toy")
    assert {p.name for p in out.iterdir()} == {"model.safetensors", "config.yaml"}
    again = ToyRegressor.from_pretrained(out)
    assert again.hparams.hidden == 5 and again.hparams.lr == 0.3
    _assert_same_weights(_state(model), _state(again))
    assert ToyRegressor.from_pretrained(out, lr=0.01).hparams.lr == 0.01  # overrides
    assert isinstance(HubMixin.from_pretrained(out), ToyRegressor)
    assert isinstance(load_pretrained(str(out)), ToyRegressor)

    # tied parameters: stored once (safetensors refuses shared storage), tied again after loading
    assert sys.modules[TiedToy.__module__].TiedToy is TiedToy  # config.yaml's class path resolves
    tied = TiedToy(hidden=4)
    assert tied.enc.weight is tied.dec.weight
    path = tied.save_pretrained(tmp_path / "tied")
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        assert ("enc.weight" in f.keys()) != ("dec.weight" in f.keys())  # one copy
    back = TiedToy.from_pretrained(path)
    _assert_same_weights(_state(tied), _state(back))
    assert back.enc.weight is back.dec.weight
    with pytest.raises(ZooError, match="not a TiedToy"):
        TiedToy.from_pretrained(out)  # a plain ToyRegressor

    # a config.yaml naming something that is not a LightningModule is refused
    (out / "config.yaml").write_text("model:\n  class_path: torch.nn.Linear\n  init_args: {in_features: 4, "
                                     "out_features: 1}\n")
    with pytest.raises(ZooError, match="torch.nn.Linear is not a LightningModule"):
        ToyRegressor.from_pretrained(out)
    (out / "config.yaml").write_text("model:\n  class_path: os.system\n")
    with pytest.raises(ZooError, match="not a LightningModule"):
        ToyRegressor.from_pretrained(out)
    (out / "config.yaml").write_text("model:\n  class_path: zoo_toy.NoSuchModule\n")
    with pytest.raises(ZooError, match="does not exist"):
        ToyRegressor.from_pretrained(out)
    # only a pickle, no safetensors
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")
    with pytest.raises(ZooError, match=r"only pickled weights \(pytorch_model.bin\)"):
        ToyRegressor.from_pretrained(pickled)



def test_from_pretrained_refuses_broken_or_misfitting_weights_in_one_line(tmp_path):
    out = ToyRegressor(hidden=5).save_pretrained(tmp_path / "toy")
    good = (out / "model.safetensors").read_bytes()
    # weights of another shape: the config asks for hidden=6
    with pytest.raises(ZooError, match=r"do not fit ToyRegressor: size mismatch for .*: copying a param with shape "
                                       r"torch.Size\(\[5, .*current model is torch.Size\(\[6, .*\]\)\.$"):
        ToyRegressor.from_pretrained(out, hidden=6)
    # a truncated download, random bytes, an empty file
    for broken in (good[: len(good) // 2], os.urandom(256), b""):
        (out / "model.safetensors").write_bytes(broken)
        with pytest.raises(ZooError, match=r"model.safetensors is not a readable safetensors file \("):
            ToyRegressor.from_pretrained(out)


def test_a_run_dir_whose_checkpoint_does_not_fit_is_refused_in_one_line(in_tmp, toy_config, hub, capsys):
    """from_pretrained(run dir) and `zoo push` read the run's checkpoint: weights that do not fit its config (an
    edited or damaged file) were torch's load_state_dict traceback."""
    from zoo.cli import main

    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]) == 0
    (run_dir,) = list((in_tmp / "runs" / "toy").iterdir())
    last = run_dir / "checkpoints" / "last.ckpt"
    ckpt = torch.load(last, weights_only=False)
    ckpt["state_dict"]["net.0.weight"] = torch.zeros(3, 3)
    torch.save(ckpt, last)
    needle = f"weights in {last} do not fit ToyRegressor: size mismatch for net.0.weight"
    with pytest.raises(ZooError, match=re.escape(needle)):
        ToyRegressor.from_pretrained(run_dir)
    capsys.readouterr()
    assert main(["push", str(run_dir), "--repo", "org/misfit", "--endpoint", hub.endpoint]) == 2
    assert capsys.readouterr().err.startswith(f"zoo: error: {needle}")
    assert "org/misfit" not in hub.store.repos  # refused before the repo was created


# -- 4. push of something that is not a run dir -----------------------------------------------------------

def test_push_not_a_run_dir_is_a_one_line_error(tmp_path, hub, capsys):
    from zoo.cli import main

    not_a_run = tmp_path / "not_a_run"
    not_a_run.mkdir()
    assert main(["push", str(not_a_run), "--repo", "org/x", "--endpoint", hub.endpoint]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error:") and "\n" not in err and "not a run dir" in err
    assert main(["push", str(tmp_path / "missing"), "--repo", "org/x", "--endpoint", hub.endpoint]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error:") and "\n" not in err
    assert main(["push", str(not_a_run)]) == 2  # --repo is required
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoo: error:") and "\n" not in err and "repo" in err
    assert "org/x" not in hub.store.repos  # nothing was created
    assert not hub.log  # refused before any request


def test_push_and_pull_failures_at_the_hub_are_one_line_errors(in_tmp, toy_config, hub, monkeypatch, capsys):
    from huggingface_hub import constants

    from zoo.cli import main

    assert main(["fit", "--config", str(toy_config), "--trainer.max_epochs", "1", "--wandb_mode", "disabled"]) == 0
    run = str(next(Path("runs/toy").iterdir()))
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    capsys.readouterr()

    def one_error(*argv):
        assert main(list(argv)) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("zoo: error:") and "\n" not in err, err
        return err

    assert "'bad id' is not a Hub repo id like org/name" in one_error("push", run, "--repo", "bad id",
                                                                      "--endpoint", hub.endpoint)
    assert "'bad id' is neither a local directory nor a Hub repo id" in one_error("pull", "bad id",
                                                                                  "--endpoint", hub.endpoint)
    assert "cannot push to Hub repo 'org/x': " in one_error("push", run, "--repo", "org/x", "--endpoint", closed)
    assert "cannot read Hub repo 'org/x': " in one_error("pull", "org/x", "--endpoint", closed)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "offline mode is enabled" in one_error("push", run, "--repo", "org/x", "--endpoint", hub.endpoint)
    assert "org/x" not in hub.store.repos
