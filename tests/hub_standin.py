"""A stand-in Hugging Face hub on 127.0.0.1, serving in-memory repositories through the
endpoints that huggingface_hub 2.4's ``snapshot_download`` calls, so the real download code runs:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: the model info, whose
  ``sha`` is the commit the revision points at;
- ``GET /api/models/{repo}/tree/{commit}``: the file listing, one page, without Xet hashes;
- ``HEAD``/``GET /{repo}/resolve/{commit}/{path}``: a small file directly (ETag = git blob sha1,
  X-Repo-Commit, Content-Length); a ``*.safetensors`` file as the hub answers for LFS files, a
  302 to a second origin standing for the CDN, with X-Linked-Etag (its sha256), X-Linked-Size and
  X-Repo-Commit;
- ``GET`` on the CDN origin ``/{repo}/{sha256}``: the LFS file's bytes.

Errors carry the hub's X-Error-Code (RepoNotFound, RevisionNotFound) or X-Error-Message, which is
what huggingface_hub turns into its exceptions. No Xet header or hash is ever sent, so the plain
HTTP path is taken. Every request is recorded in ``requests``.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


@dataclass
class StandinRepo:
    files: dict[str, bytes]
    revisions: dict[str, str]  # branch or tag -> commit (40 hex digits)
    token: str | None = None  # private: only this bearer token may read it
    failing: tuple[str, ...] = ()  # files whose download answers 500

    def commit(self, revision: str) -> str | None:
        if revision in self.revisions:
            return self.revisions[revision]
        return revision if revision in self.revisions.values() else None


@dataclass(frozen=True, slots=True)
class Request:
    origin: str  # "hub" or "cdn"
    method: str
    path: str
    authorization: str | None


def commit_id(label: str) -> str:
    return hashlib.sha1(label.encode()).hexdigest()


def repo_from_folder(folder: Path, extra: dict[str, bytes] | None = None, **kwargs) -> StandinRepo:
    """A repository holding ``folder``'s files (and ``extra`` ones), on revision main."""
    files = {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir()) if p.is_file()}
    kwargs.setdefault("revisions", {"main": commit_id(str(folder))})
    return StandinRepo(files={**files, **(extra or {})}, **kwargs)


def _blob_sha1(data: bytes) -> str:  # git's object id of a file
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _is_lfs(path: str) -> bool:
    return path.endswith((".safetensors", ".bin", ".gguf"))


@dataclass
class StandinHub:
    repos: dict[str, StandinRepo]
    requests: list[Request] = field(default_factory=list)
    _servers: dict[str, ThreadingHTTPServer] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return self._url("hub")

    def start(self) -> StandinHub:
        for origin in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self, origin))
            server.daemon_threads = True
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self._servers[origin] = server
        return self

    def stop(self) -> None:
        for server in self._servers.values():
            server.shutdown()
            server.server_close()

    def __enter__(self) -> StandinHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _url(self, origin: str) -> str:
        host, port = self._servers[origin].server_address[:2]
        return f"http://{host}:{port}"


def _handler(hub: StandinHub, origin: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def do_GET(self) -> None:
            self._serve(body=True)

        def _serve(self, body: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append(
                Request(origin, self.command, path, self.headers.get("Authorization"))
            )
            self._body = body
            if origin == "cdn":
                repo_id, _, sha256 = path.lstrip("/").rpartition("/")
                return self._cdn(repo_id, sha256)
            if path.startswith("/api/models/"):
                return self._api(path.removeprefix("/api/models/"))
            org, name, resolve, rest = [*path.lstrip("/").split("/", 3), "", "", ""][:4]
            if resolve != "resolve":
                return self._send(404, b"not found")
            revision, _, file = rest.partition("/")
            self._resolve(f"{org}/{name}", revision, file)

        def _api(self, rest: str) -> None:
            org, name, *tail = rest.split("/")
            repo = self._repo(f"{org}/{name}")
            if repo is None:
                return
            kind, revision = [*tail, ""][:2] if tail else ("revision", "main")
            if kind not in ("revision", "tree"):
                return self._send(404, b"not found")
            commit = repo.commit(revision)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            if kind == "revision":
                siblings = [{"rfilename": p} for p in repo.files]
                info = {"id": f"{org}/{name}", "sha": commit, "private": repo.token is not None,
                        "siblings": siblings}  # fmt: skip
                return self._json(info)
            tree = []
            for path, data in repo.files.items():
                entry = {"type": "file", "oid": _blob_sha1(data), "size": len(data), "path": path}
                if _is_lfs(path):
                    sha256 = hashlib.sha256(data).hexdigest()
                    entry["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": 134}
                tree.append(entry)
            self._json(tree)

        def _resolve(self, repo_id: str, revision: str, file: str) -> None:
            repo = self._repo(repo_id)
            if repo is None:
                return
            commit = repo.commit(revision)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            if file not in repo.files:
                return self._error(404, "EntryNotFound", f"{file} does not exist")
            data = repo.files[file]
            if not _is_lfs(file):
                etag = {"ETag": f'"{_blob_sha1(data)}"', "X-Repo-Commit": commit}
                return self._send(200, data, etag)
            sha256 = hashlib.sha256(data).hexdigest()
            lfs = {
                "Location": f"{hub._url('cdn')}/{repo_id}/{sha256}",
                "ETag": f'"{_blob_sha1(data)}"',
                "X-Linked-Etag": f'"{sha256}"',
                "X-Linked-Size": str(len(data)),
                "X-Repo-Commit": commit,
            }
            self._send(302, b"", lfs)

        def _cdn(self, repo_id: str, sha256: str) -> None:
            repo = hub.repos.get(repo_id)
            for path, data in (repo.files if repo else {}).items():
                if _is_lfs(path) and hashlib.sha256(data).hexdigest() == sha256:
                    if path in repo.failing:
                        return self._send(500, b"storage failure")
                    return self._send(200, data)
            self._send(404, b"no such object")

        def _repo(self, repo_id: str) -> StandinRepo | None:
            """The repository, or None once the refusal the hub gives is sent."""
            repo = hub.repos.get(repo_id)
            given = self.headers.get("Authorization")
            if repo is not None and (repo.token is None or given == f"Bearer {repo.token}"):
                return repo
            if repo is not None and given is not None:
                self._error(401, None, "Invalid credentials in Authorization header")
            else:  # the hub does not tell a private repository from a missing one
                self._error(401 if given is None else 404, "RepoNotFound", "Repository not found")
            return None

        def _error(self, status: int, code: str | None, message: str) -> None:
            headers = {"X-Error-Message": message, **({"X-Error-Code": code} if code else {})}
            self._send(status, json.dumps({"error": message}).encode(), headers)

        def _json(self, payload) -> None:
            self._send(200, json.dumps(payload).encode(), {"Content-Type": "application/json"})

        def _send(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self._body:
                self.wfile.write(data)

    return Handler
