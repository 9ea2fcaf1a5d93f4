"""The Hugging Face hub as tests meet it without a network: a hub cache on disk in
huggingface_hub's layout, a guard that refuses every outgoing connection, and an HTTP server on
127.0.0.1 that answers for gated and unknown repositories with the hub's own headers.

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
    """Answers as huggingface.co does without a token: a gated repository's metadata and file
    list are public and its files are refused (401, X-Error-Code: GatedRepo); a repository
    that does not exist (or is private) is refused everywhere (401, X-Error-Code: RepoNotFound)."""

    gated: str = ""
    files = {"config.json": b"{}", "model.safetensors": b"\0" * 64}

    def log_message(self, *args):  # keep the test's output clean
        pass

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        commit = commit_sha(self.gated)
        if path.startswith(f"/api/models/{self.gated}/revision/"):
            siblings = [{"rfilename": name} for name in self.files]
            info = {"id": self.gated, "sha": commit, "gated": "manual", "siblings": siblings}
            return self._json(info)
        if path.startswith(f"/api/models/{self.gated}/tree/"):
            return self._json(
                [
                    {"type": "file", "path": name, "size": len(data), "oid": commit_sha(name)}
                    for name, data in self.files.items()
                ]
            )
        if path.startswith(f"/{self.gated}/resolve/"):
            return self._refuse("GatedRepo", GATED_MESSAGE.format(repo=self.gated))
        return self._refuse("RepoNotFound", "Repository not found")

    def _json(self, body) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _refuse(self, code: str, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        self.send_response(401)
        self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)


@contextmanager
def hub_server(gated_repo: str):
    """An HTTP hub on 127.0.0.1 where `gated_repo` is gated and every other repository is
    unknown; yields its endpoint URL (for HF_ENDPOINT)."""
    handler = type("GatedHubHandler", (_HubHandler,), {"gated": gated_repo})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
