"""A loopback Hugging Face Hub for the tests: the endpoints the real `huggingface_hub` client uses.

`HubServer` speaks the Hub HTTP API (as `huggingface_hub` 2.x calls it) from an in-memory store with git-like
commits, so `create_repo`, `upload_folder` / `upload_file` / `create_commit`, `model_info`, `list_repo_files`,
`list_repo_tree`, `hf_hub_download` and `snapshot_download` run unmodified against it:

    POST /api/repos/create                                  create a repo (initial commit with .gitattributes)
    POST /api/validate-yaml                                 README.md front matter check (before uploads)
    GET  /api/models/{repo}[/revision/{rev}]                model info: sha, siblings, cardData, model-index
    GET  /api/models/{repo}/tree/{rev}[/{path}]             tree listing (recursive, cursor pagination, Link)
    POST /api/models/{repo}/preupload/{rev}                 upload modes: always "regular" (no LFS, no Xet)
    POST /api/models/{repo}/commit/{rev}                    NDJSON commit: header, file (base64), deletedFile,
                                                            deletedFolder; parentCommit checked
    HEAD|GET /{repo}/resolve/{rev}/{path}                   file metadata (X-Repo-Commit, ETag, sizes) / bytes

Unknown repos, revisions and files answer 404 with the Hub's `X-Error-Code` (RepoNotFound, RevisionNotFound,
EntryNotFound) so the client raises its own typed errors. Writes need an `Authorization: Bearer` header (any
token), as on the Hub. With `lfs_redirect=True`, files whose names end in `lfs_suffixes` are served the way the
Hub serves LFS files: the resolve URL answers 302 with X-Linked-Etag (sha256) / X-Linked-Size and a Location on
another origin (`localhost` instead of `127.0.0.1`, i.e. a "CDN"), and tree entries carry `lfs` info.

Every request is recorded in `server.log` as (method, path), unhandled ones in `server.unhandled` and server
failures (500) in `server.errors`, so tests can assert that the client used nothing this server lacks.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional
from urllib.parse import parse_qs, unquote, urlsplit

GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n*.bin filter=lfs diff=lfs merge=lfs -text\n"
REPO_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def git_blob_sha(data: bytes) -> str:
    """The git object id of a blob (what the Hub returns as `oid` / ETag for regular files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")


@dataclass
class Commit:
    oid: str
    files: dict[str, bytes]
    title: str
    parent: Optional[str]
    date: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    created_at: str
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)  # branch name -> commit oid

    def resolve(self, revision: str) -> Optional[Commit]:
        if revision in self.branches:
            return self.commits[self.branches[revision]]
        return self.commits.get(revision)


class HubError(Exception):
    def __init__(self, status: int, message: str, code: Optional[str] = None, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.code, self.headers = status, message, code, headers or {}


class HubStore:
    """In-memory repos; each commit is a full snapshot of the files, its oid a sha1 like git's."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lock = threading.RLock()

    def create(self, repo_id: str, private: bool = False) -> Repo:
        with self.lock:
            if repo_id in self.repos:
                raise HubError(409, "You already created this model repo")
            repo = Repo(repo_id=repo_id, private=private, created_at=_now())
            self.repos[repo_id] = repo
            self._commit(repo, "main", {".gitattributes": GITATTRIBUTES}, "initial commit", None)
            return repo

    def get(self, repo_id: str) -> Repo:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise HubError(404, "Repository not found", "RepoNotFound")
        return repo

    def commit_at(self, repo_id: str, revision: str) -> tuple[Repo, Commit]:
        repo = self.get(repo_id)
        commit = repo.resolve(revision)
        if commit is None:
            raise HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return repo, commit

    def _commit(self, repo: Repo, branch: str, files: dict[str, bytes], title: str, parent: Optional[str]) -> Commit:
        tree = hashlib.sha1()
        for path in sorted(files):
            tree.update(path.encode() + b"\0" + git_blob_sha(files[path]).encode())
        oid = hashlib.sha1(b"\0".join([tree.digest(), (parent or "").encode(), title.encode(),
                                       str(time.time_ns()).encode()])).hexdigest()
        commit = Commit(oid=oid, files=dict(files), title=title, parent=parent, date=_now())
        repo.commits[oid] = commit
        repo.branches[branch] = oid
        return commit

    def apply(self, repo_id: str, branch: str, title: str, parent_commit: Optional[str],
              adds: dict[str, bytes], deletes: list[str], delete_folders: list[str]) -> Commit:
        with self.lock:
            repo = self.get(repo_id)
            if branch not in repo.branches:
                raise HubError(404, f"Invalid rev id: {branch}", "RevisionNotFound")
            head = repo.commits[repo.branches[branch]]
            if parent_commit is not None and parent_commit != head.oid:
                raise HubError(412, "A commit has happened since. Please refresh and try again.")
            files = dict(head.files)
            for path in deletes:
                if path not in files:
                    raise HubError(404, f"A file with this name doesn't exist: {path}", "EntryNotFound")
                del files[path]
            for folder in delete_folders:
                prefix = folder.rstrip("/") + "/"
                doomed = [p for p in files if p.startswith(prefix)]
                if not doomed:
                    raise HubError(404, f"A folder with this name doesn't exist: {folder}", "EntryNotFound")
                for p in doomed:
                    del files[p]
            files.update(adds)
            return self._commit(repo, branch, files, title, head.oid)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request):
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            conns, self.connections = list(self.connections), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class HubServer:
    """`with HubServer() as hub:` or `hub.start()` / `hub.stop()`; `hub.endpoint` is http://127.0.0.1:PORT."""

    def __init__(self, page_size: int = 1000, lfs_redirect: bool = False,
                 lfs_suffixes: tuple[str, ...] = (".safetensors", ".bin")) -> None:
        self.store = HubStore()
        self.page_size = page_size
        self.lfs_redirect = lfs_redirect
        self.lfs_suffixes = lfs_suffixes
        self.log: list[tuple[str, str]] = []
        self.unhandled: list[tuple[str, str]] = []
        self.errors: list[str] = []  # tracebacks of requests this server failed on (500)
        self._httpd: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> "HubServer":
        handler = type("HubHandler", (_Handler,), {"hub": self})
        self._httpd = _Server(("127.0.0.1", 0), handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="hub-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd.close_connections()  # keep-alive connections would otherwise still be served
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> "HubServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://localhost:{self.port}"

    # -- helpers for tests ------------------------------------------------------------------------------
    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        return dict(self.store.commit_at(repo_id, revision)[1].files)

    def is_lfs(self, path: str) -> bool:
        return self.lfs_redirect and path.endswith(self.lfs_suffixes)


_TREE = re.compile(rf"^/api/models/({REPO_PART}/{REPO_PART})/tree/([^/]+)(?:/(.*))?$")
_INFO = re.compile(rf"^/api/models/({REPO_PART}/{REPO_PART})(?:/revision/([^/]+))?$")
_PREUPLOAD = re.compile(rf"^/api/models/({REPO_PART}/{REPO_PART})/preupload/([^/]+)$")
_COMMIT = re.compile(rf"^/api/models/({REPO_PART}/{REPO_PART})/commit/([^/]+)$")
_RESOLVE = re.compile(rf"^/({REPO_PART}/{REPO_PART})/resolve/([^/]+)/(.+)$")
_CDN = re.compile(r"^/cdn/([0-9a-f]{64})$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubServer
    protocol_version = "HTTP/1.1"
    server_version = "zoo-test-hub/1.0"
    timeout = 30

    def log_message(self, format, *args):  # noqa: A002 - keep pytest output clean
        pass

    # -- plumbing -------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def _send(self, status: int, body: bytes = b"", headers: Optional[dict] = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _json(self, status: int, data, headers: Optional[dict] = None) -> None:
        self._send(status, json.dumps(data).encode(), headers)

    def _error(self, err: HubError) -> None:
        headers = {"X-Error-Message": err.message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._json(err.status, {"error": err.message}, headers)

    def _require_auth(self) -> None:
        auth = self.headers.get("Authorization", "")
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            raise HubError(401, "Invalid credentials in Authorization header")

    def _endpoint(self) -> str:
        return f"http://{self.headers.get('Host') or f'127.0.0.1:{self.hub.port}'}"

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        self.hub.log.append((self.command, url.path))
        routes = {
            "GET": [(_INFO, self._model_info), (_TREE, self._tree), (_RESOLVE, self._resolve), (_CDN, self._cdn)],
            "HEAD": [(_RESOLVE, self._resolve), (_CDN, self._cdn)],
            "POST": [(_PREUPLOAD, self._preupload), (_COMMIT, self._commit)],
        }
        try:
            if self.command == "POST" and url.path == "/api/repos/create":
                return self._create_repo()
            if self.command == "POST" and url.path == "/api/validate-yaml":
                return self._validate_yaml()
            for pattern, handler in routes.get(self.command, []):
                m = pattern.match(url.path)
                if m:
                    return handler(*m.groups())
            self.hub.unhandled.append((self.command, url.path))
            self._body()
            raise HubError(404, f"{self.command} {url.path} is not implemented by the test Hub")
        except HubError as e:
            self._error(e)
        except (ValueError, KeyError) as e:
            self._error(HubError(400, f"bad request: {e}"))
        except Exception as e:  # noqa: BLE001 - a bug in this server: answer 500 and let the test see it
            self.hub.errors.append(f"{self.command} {url.path}: {traceback.format_exc()}")
            self._error(HubError(500, f"test Hub failure: {type(e).__name__}: {e}"))

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = _dispatch

    # -- endpoints ------------------------------------------------------------------------------------
    def _create_repo(self) -> None:
        payload = json.loads(self._body() or b"{}")
        self._require_auth()
        if payload.get("type", "model") != "model":
            raise HubError(400, "the test Hub only has model repos")
        name, org = payload.get("name"), payload.get("organization")
        if not name or not re.fullmatch(REPO_PART, name) or (org and not re.fullmatch(REPO_PART, org)):
            raise HubError(400, f"invalid repo name {name!r}")
        repo_id = f"{org or 'zoo-test-user'}/{name}"
        private = payload.get("visibility") == "private" or bool(payload.get("private"))
        url = f"{self._endpoint()}/{repo_id}"
        try:
            self.hub.store.create(repo_id, private=private)
        except HubError as e:
            return self._json(409, {"error": e.message, "url": url}, {"X-Error-Message": e.message})
        self._json(200, {"url": url, "name": repo_id, "id": repo_id})

    def _validate_yaml(self) -> None:
        import yaml

        payload = json.loads(self._body() or b"{}")
        content = payload.get("content", "")
        errors = []
        m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", content, re.S)
        if m:
            try:
                meta = yaml.safe_load(m.group(1))
                if meta is not None and not isinstance(meta, dict):
                    errors.append({"message": "metadata must be a YAML mapping"})
            except yaml.YAMLError as e:
                errors.append({"message": f"invalid YAML: {e}"})
        self._json(400 if errors else 200, {"errors": errors, "warnings": []})

    def _card_data(self, files: dict[str, bytes]) -> dict:
        import yaml

        readme = files.get("README.md")
        if readme is None:
            return {}
        m = re.match(r"^---\s*\n(.*?)\n---\s*(\n|$)", readme.decode("utf-8", "replace"), re.S)
        try:
            meta = yaml.safe_load(m.group(1)) if m else None
        except yaml.YAMLError:
            return {}
        return meta if isinstance(meta, dict) else {}

    def _model_info(self, repo_id: str, revision: Optional[str]) -> None:
        repo, commit = self.hub.store.commit_at(repo_id, unquote(revision or "main"))
        blobs = self.query.get("blobs", ["false"])[0].lower() in ("1", "true")
        siblings = []
        for path in sorted(commit.files):
            sib = {"rfilename": path}
            if blobs:
                sib.update(self._entry(path, commit.files[path]))
                sib.pop("path"), sib.pop("type")
                sib["blobId"] = sib.pop("oid")
                if "lfs" in sib:
                    sib["lfs"] = {"sha256": sib["lfs"]["oid"], "size": sib["lfs"]["size"],
                                  "pointerSize": sib["lfs"]["pointerSize"]}
            siblings.append(sib)
        card = self._card_data(commit.files)
        info = {
            "_id": hashlib.sha1(repo_id.encode()).hexdigest()[:24], "id": repo_id, "modelId": repo_id,
            "author": repo_id.split("/")[0], "sha": commit.oid, "lastModified": commit.date,
            "createdAt": repo.created_at, "private": repo.private, "gated": False, "disabled": False,
            "downloads": 0, "likes": 0, "tags": list(card.get("tags") or []),
            "library_name": card.get("library_name"), "siblings": siblings,
        }
        if card:
            info["cardData"] = card
            if "model-index" in card:
                info["model-index"] = card["model-index"]
        self._json(200, info)

    def _entry(self, path: str, data: bytes) -> dict:
        entry = {"type": "file", "oid": git_blob_sha(data), "size": len(data), "path": path}
        if self.hub.is_lfs(path):
            entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return entry

    def _tree(self, repo_id: str, revision: str, path: Optional[str]) -> None:
        _, commit = self.hub.store.commit_at(repo_id, unquote(revision))
        base = unquote(path).strip("/") if path else ""
        recursive = self.query.get("recursive", ["false"])[0].lower() in ("1", "true")
        prefix = base + "/" if base else ""
        if base and base in commit.files:
            raise HubError(400, f"{base} is a file, not a directory")
        if base and not any(p.startswith(prefix) for p in commit.files):
            raise HubError(404, f"{base} does not exist on {revision}", "EntryNotFound",
                           {"X-Repo-Commit": commit.oid})
        entries: dict[str, dict] = {}
        for p in sorted(commit.files):
            if not p.startswith(prefix):
                continue
            parts = p[len(prefix):].split("/")
            for depth in range(1, len(parts)):  # the folders on the way
                if not recursive and depth > 1:
                    break
                folder = prefix + "/".join(parts[:depth])
                entries.setdefault(folder, {"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(),
                                            "size": 0, "path": folder})
            if recursive or len(parts) == 1:
                entries[p] = self._entry(p, commit.files[p])
        items = [entries[k] for k in sorted(entries)]
        start = int(self.query.get("cursor", ["0"])[0])
        page = items[start:start + self.hub.page_size]
        headers = {}
        if start + self.hub.page_size < len(items):
            params = f"recursive={str(recursive).lower()}&cursor={start + self.hub.page_size}"
            headers["Link"] = f'<{self._endpoint()}{urlsplit(self.path).path}?{params}>; rel="next"'
        self._json(200, page, headers)

    def _preupload(self, repo_id: str, revision: str) -> None:
        payload = json.loads(self._body() or b"{}")
        self._require_auth()
        _, commit = self.hub.store.commit_at(repo_id, unquote(revision))
        files = []
        for f in payload.get("files", []):
            current = commit.files.get(f["path"])
            files.append({"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                          "oid": git_blob_sha(current) if current is not None else None})
        self._json(200, {"files": files, "commitOid": commit.oid})

    def _commit(self, repo_id: str, revision: str) -> None:
        body = self._body()
        self._require_auth()
        if self.query.get("create_pr", ["0"])[0] in ("1", "true"):
            raise HubError(400, "the test Hub does not do pull requests")
        title, parent, adds, deletes, delete_folders = None, None, {}, [], []
        for line in body.splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                title, parent = value.get("summary"), value.get("parentCommit")
            elif key == "file":
                if value.get("encoding", "base64") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                adds[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                deletes.append(value["path"])
            elif key == "deletedFolder":
                delete_folders.append(value["path"])
            elif key == "lfsFile":
                raise HubError(400, "the test Hub answers uploadMode 'regular'; LFS files cannot be committed")
            else:
                raise HubError(400, f"unknown commit operation {key!r}")
        if not title:
            raise HubError(400, "commit summary (header) is missing")
        commit = self.hub.store.apply(repo_id, unquote(revision), title, parent, adds, deletes, delete_folders)
        self._json(200, {"success": True, "commitOid": commit.oid, "pullRequestUrl": None,
                         "commitUrl": f"{self._endpoint()}/{repo_id}/commit/{commit.oid}"})

    def _resolve(self, repo_id: str, revision: str, path: str) -> None:
        _, commit = self.hub.store.commit_at(repo_id, unquote(revision))
        path = "/".join(unquote(p) for p in path.split("/"))
        data = commit.files.get(path)
        if data is None:
            raise HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.oid})
        headers = {"X-Repo-Commit": commit.oid, "Accept-Ranges": "bytes"}
        if self.hub.is_lfs(path):
            sha256 = hashlib.sha256(data).hexdigest()
            headers.update({"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(data)),
                            "ETag": f'"{git_blob_sha(data)}"',
                            "Location": f"{self.hub.cdn_endpoint}/cdn/{sha256}"})
            return self._send(302, b"", headers, "text/plain")
        headers["ETag"] = f'"{git_blob_sha(data)}"'
        self._send_bytes(data, headers)

    def _cdn(self, sha256: str) -> None:
        for repo in list(self.hub.store.repos.values()):
            for commit in list(repo.commits.values()):
                for data in commit.files.values():
                    if hashlib.sha256(data).hexdigest() == sha256:
                        return self._send_bytes(data, {"ETag": f'"{sha256}"'})
        raise HubError(404, "no such object")

    def _send_bytes(self, data: bytes, headers: dict) -> None:
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng or "")
        if m:
            start = int(m.group(1))
            end = int(m.group(2)) if m.group(2) else len(data) - 1
            if start >= len(data):
                raise HubError(416, "range not satisfiable", headers={"Content-Range": f"bytes */{len(data)}"})
            headers = {**headers, "Content-Range": f"bytes {start}-{end}/{len(data)}"}
            return self._send(206, data[start:end + 1], headers, "application/octet-stream")
        self._send(200, data, headers, "application/octet-stream")

