"""The Hugging Face hub as tests meet it without a network: a hub cache on disk in
huggingface_hub's layout, a guard that refuses every outgoing connection, and an HTTP server on
127.0.0.1 that serves, gates and refuses repositories with the hub's own headers.

The cache layout is the one `hf download` leaves: `models--org--name/blobs/<sha256>` holding
the bytes, `snapshots/<commit>/<file>` relative symlinks into blobs, and `refs/<branch or tag>`
holding the commit. A model saved by transformers' `save_pretrained` is laid out file by file.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import threading
from contextlib import contextmanager
from pathlib import Path

GATED_MESSAGE = (
    "Access to model {repo} is restricted. You must have access to it and be authenticated "
    "to access it. Please log in."
)


def commit_sha(text: str) -> str:
    """A 40-hex commit id (what refs/ files hold), derived from `text`."""
    return hashlib.sha1(text.encode()).hexdigest()


def cache_repo(cache: Path, repo_id: str, model_dir: Path, commit: str, refs=("main",)) -> Path:
    """Lays `model_dir`'s files into `cache` as commit `commit` of `repo_id`, each ref in `refs`
    pointing at it; returns the snapshot directory."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    for source in sorted(p for p in model_dir.rglob("*") if p.is_file()):
        data = source.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / source.relative_to(model_dir)
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no newline, as huggingface_hub writes it
    return snapshot


def block_network(monkeypatch, allow_loopback: bool = False) -> None:
    """Makes every outgoing connection (and name lookup) raise, except to 127.0.0.1 when
    `allow_loopback`: a test that passes under it used no network."""
    real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def allowed(host) -> bool:
        return allow_loopback and host in ("127.0.0.1", "localhost")

    def connect(self, address):
        if isinstance(address, tuple) and allowed(address[0]):
            return real_connect(self, address)
        raise OSError(f"network blocked by the test: connect to {address}")

    def getaddrinfo(host, *args, **kwargs):
        if allowed(host):
            return real_getaddrinfo(host, *args, **kwargs)
        raise socket.gaierror(f"network blocked by the test: lookup of {host}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


class _HubHandler(http.server.BaseHTTPRequestHandler):
    """Answers as huggingface.co does without a token: a repository's metadata, file list and
    files (200, with the ETag and X-Repo-Commit headers huggingface_hub caches by); a gated
    repository's metadata and file list, its files refused (401, X-Error-Code: GatedRepo); for
    a repository that does not exist (or is private) a refusal everywhere (401, X-Error-Code:
    RepoNotFound)."""

    repos: dict[str, Path] = {}
    gated: frozenset[str] = frozenset()

    def log_message(self, *args):  # keep the test's output clean
        pass

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        for repo, folder in self.repos.items():
            files = {p.relative_to(folder).as_posix(): p for p in folder.rglob("*") if p.is_file()}
            commit = commit_sha(repo)
            if path.startswith(f"/api/models/{repo}/revision/"):
                siblings = [{"rfilename": name} for name in files]
                gated = "manual" if repo in self.gated else False
                return self._json({"id": repo, "sha": commit, "gated": gated, "siblings": siblings})
            if path.startswith(f"/api/models/{repo}/tree/"):
                return self._json(
                    [
                        {
                            "type": "file",
                            "path": name,
                            "size": p.stat().st_size,
                            "oid": commit_sha(name),
                        }
                        for name, p in files.items()
                    ]
                )
            prefix = f"/{repo}/resolve/{commit}/"
            if path.startswith(f"/{repo}/resolve/") and repo in self.gated:
                return self._refuse("GatedRepo", GATED_MESSAGE.format(repo=repo))
            if path.startswith(prefix) and path[len(prefix) :] in files:
                return self._file(files[path[len(prefix) :]].read_bytes(), commit)
        return self._refuse("RepoNotFound", "Repository not found")

    def _json(self, body) -> None:
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _file(self, data: bytes, commit: str) -> None:
        etag = f'"{hashlib.sha256(data).hexdigest()}"'
        self._send(200, data, {"ETag": etag, "X-Repo-Commit": commit})

    def _refuse(self, code: str, message: str) -> None:
        body = json.dumps({"error": message}).encode()
        headers = {"X-Error-Code": code, "X-Error-Message": message}
        self._send(401, body, {"Content-Type": "application/json", **headers})

    def _send(self, status: int, data: bytes, headers: dict[str, str]) -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(data))}.items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


@contextmanager
def hub_server(repos: dict[str, Path], gated=()):
    """An HTTP hub on 127.0.0.1 serving each repository of `repos` (id -> folder of its files,
    one commit, `commit_sha(id)`), those in `gated` gated, every other one unknown; yields its
    endpoint URL (for HF_ENDPOINT)."""
    handler = type("LocalHubHandler", (_HubHandler,), {"repos": repos, "gated": frozenset(gated)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
