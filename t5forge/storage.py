"""One file-system layer for local paths and object-storage URLs (`gs://`, `s3://`, ...).

T5X users keep vocabularies, corpora, gin files and outputs in buckets. Call sites go through
`storage.path()` (an etils `epath.Path`, the layer T5X and Orbax use: plain `os` calls for local
paths, fsspec's gcsfs/s3fs for URLs) instead of `pathlib`/`open`, so a URL works wherever a
local path does and a local path behaves exactly as before.

Credentials and endpoints come from each store's own configuration: for S3 the usual
`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_ENDPOINT_URL` environment or `~/.aws`; for GCS
application-default credentials. The errors a user can fix (no such bucket, no credentials, a
store that does not answer, a missing fsspec backend) become one `StorageError` line naming the
URL and the fix.

Every file t5forge writes whole goes through `write_atomically` / `replaced_atomically`
(a temporary file beside the target, fsync, rename: a crash or a full disk leaves the old file),
and every path a command reads or writes is checked by `require_kind` first (a file where a
directory belongs, or the reverse, is one line instead of a traceback).
"""

from __future__ import annotations

import contextlib
import glob as local_glob
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from etils import epath

from t5forge.errors import StorageError

# URLs go through fsspec (gcsfs, s3fs), whose credentials and failures the messages below name.
# epath would switch to TensorFlow's gfile for good once `tensorflow` looks importable when it
# first meets a URL, which t5forge.compat's stand-in makes true while task modules import.
os.environ.setdefault("EPATH_USE_TF", "false")

# Object stores t5forge names in its messages; any fsspec protocol still works through epath.
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
_BACKENDS = {"gs": "gcsfs", "s3": "s3fs"}
_WILDCARD = re.compile(r"[*?\[]")
_COPY_CHUNK = 16 << 20


def is_url(location: str | os.PathLike) -> bool:
    """True for `scheme://...` locations (object stores), False for local paths."""
    return bool(_URL.match(os.fspath(location)))


def path(location: str | os.PathLike) -> epath.Path:
    """The location as an `epath.Path`: a URL as is, a local path with `~` expanded."""
    text = os.fspath(location)
    return epath.Path(text if is_url(text) else os.path.expanduser(text))


def forget_listings(location: str | os.PathLike) -> None:
    """Drops fsspec's cached listings of the store, so objects that another process wrote
    since this one last looked (a run's new checkpoints, a lock) are seen."""
    from etils.epath import backend

    with reported(location):
        backend.fsspec_backend.fs(os.fspath(location)).invalidate_cache()


def glob(pattern: str | os.PathLike) -> list[str]:
    """Sorted matches of a glob, local or on an object store (`gs://b/data/*.jsonl`), as the
    store holds them now."""
    text = os.fspath(pattern)
    if not is_url(text):
        return sorted(local_glob.glob(os.path.expanduser(text)))
    forget_listings(text)
    wildcard = _WILDCARD.search(text)
    if wildcard is None:
        return [text] if _exists(text) else []
    root, _, _ = text[: wildcard.start()].rpartition("/")
    relative = text[len(root) + 1 :]
    with reported(root):
        return sorted(str(match) for match in epath.Path(root).glob(relative))


def _exists(text: str) -> bool:
    with reported(text):
        return epath.Path(text).exists()


def files_under(location: str | os.PathLike) -> list[os.PathLike]:
    """Every file below a folder, sorted (on an object store: every object under the prefix)."""
    folder = path(location)
    if not is_url(folder):
        return sorted(p for p in Path(folder).rglob("*") if p.is_file())
    from etils.epath import backend

    text = os.fspath(folder).rstrip("/")
    scheme = text.split("://", 1)[0]
    forget_listings(text)
    with reported(text):
        found = backend.fsspec_backend.fs(text).find(text)
    return sorted(path(name if is_url(name) else f"{scheme}://{name}") for name in found)


def copy(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Copies one file between local paths and objects, either way, in chunks."""
    with reported(source), reported(target):
        with path(source).open("rb") as reader, path(target).open("wb") as writer:
            shutil.copyfileobj(reader, writer, _COPY_CHUNK)


def require_kind(location: str | os.PathLike, kind: str, role: str) -> None:
    """Refuses, in one `StorageError` line naming `role` (MODEL_DIR, train.lock, a data
    file...), a local path that exists as the other kind ('file' or 'directory') or that lies
    under a file, before any command trips over it with a traceback.

    Object stores have no directories to collide with: URLs pass.
    """
    text = os.fspath(location)
    if is_url(text):
        return
    target = Path(os.path.expanduser(text))
    fix = "remove or rename it, or give another path"
    if target.exists() and kind == "directory" and not target.is_dir():
        raise StorageError(f"{role} {target} is a file, not a directory; {fix}")
    if target.is_dir() and kind == "file":
        raise StorageError(f"{role} {target} is a directory, not a file; {fix}")
    for parent in target.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise StorageError(
                    f"{role} {target} lies under {parent}, a file; remove or rename that "
                    "file, or give another path"
                )
            return


def make_directory(location: str | os.PathLike, role: str) -> None:
    """Creates an output directory (and its parents) after `require_kind`'s check."""
    require_kind(location, "directory", role)
    with reported(location):
        path(location).mkdir(parents=True, exist_ok=True)


@contextlib.contextmanager
def replaced_atomically(location: str | os.PathLike, durable: bool = True) -> Iterator[Path]:
    """Yields a temporary local file for the caller to write in full; `location` is replaced
    by it only when the block ends without an error, so readers see the old file or the new
    one, never half of one (a full disk or a kill mid-write leaves the old file).

    Local targets: the temporary file lies beside the target and is renamed over it, with the
    data and the rename flushed to disk first (`durable`), as a power cut could otherwise keep
    the rename but not the bytes. An object store replaces an object whole: the file is
    uploaded once written.
    """
    text = os.fspath(location)
    if is_url(text):
        staging = staging_folder(text)
        staging.parent.mkdir(parents=True, exist_ok=True)
        temporary = staging.with_name(f".{staging.name}.{os.getpid()}.upload")
    else:
        target = Path(os.path.expanduser(text))
        require_kind(target, "file", "the output")
        temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        yield temporary
        if is_url(text):
            copy(temporary, text)
            return
        if durable:
            _flush_to_disk(temporary)
        os.replace(temporary, target)
        if durable:
            _flush_to_disk(target.parent)
    except OSError as error:
        if is_url(text) or not _of_the_temporary(error, temporary):
            raise
        raise OSError(error.errno, error.strerror, str(target)) from error
    finally:
        temporary.unlink(missing_ok=True)


def _of_the_temporary(error: OSError, temporary: Path) -> bool:
    """Whether a failure is the local temporary file's, which the error should report as the
    target's: a full disk's write() and fsync name no file, and the hidden temporary is not
    a name the user gave."""
    return error.errno is not None and error.filename in (None, str(temporary))


def write_atomically(
    location: str | os.PathLike, content: str | bytes, durable: bool = True
) -> None:
    """Replaces the file at `location` by `content` (text as UTF-8) in one step; see
    `replaced_atomically`. Every file t5forge writes whole goes through here."""
    data = content.encode() if isinstance(content, str) else content
    with replaced_atomically(location, durable) as temporary:
        temporary.write_bytes(data)


def _flush_to_disk(local: Path) -> None:
    """fsync of a file or a directory (the directory makes a rename inside it durable)."""
    descriptor = os.open(local, os.O_RDONLY | (os.O_DIRECTORY if local.is_dir() else 0))
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def staging_folder(url: str) -> Path:
    """The local folder that mirrors an object-storage folder (a MODEL_DIR, a task cache):
    under $T5FORGE_STAGING_DIR, default ~/.cache/t5forge/staging, one folder per URL."""
    root = os.environ.get("T5FORGE_STAGING_DIR") or Path.home() / ".cache" / "t5forge" / "staging"
    return Path(root).expanduser() / re.sub(r"[^A-Za-z0-9._-]+", "_", url.rstrip("/"))


def open_file(location: str | os.PathLike, mode: str = "rb") -> IO:
    """Opens a local file or an object; storage failures of a URL are a `StorageError`."""
    text = os.fspath(location)
    if not is_url(text):
        return open(os.path.expanduser(text), mode)  # noqa: SIM115 - the caller closes it
    with reported(text):
        return epath.Path(text).open(mode)


@contextlib.contextmanager
def reported(location: str | os.PathLike) -> Iterator[None]:
    """Turns an object store's refusals inside the block into one `StorageError` line.

    Local paths pass through untouched (their OSErrors are reported where they are caught), and
    so do a missing or existing object (FileNotFoundError, FileExistsError...), which callers
    already explain in their terms.
    """
    text = os.fspath(location)
    if not is_url(text):
        yield
        return
    try:
        yield
    except (StorageError, FileNotFoundError, FileExistsError, IsADirectoryError) as error:
        if isinstance(error, FileNotFoundError) and _missing_bucket(error):
            raise StorageError(
                f"{text}: the bucket does not exist or is not visible with these credentials; "
                "create it or correct the URL"
            ) from None
        raise
    except ImportError as error:
        scheme = text.split("://", 1)[0]
        package = _BACKENDS.get(scheme, f"the fsspec package for {scheme}://")
        raise StorageError(
            f"{text}: reading {scheme}:// needs {package} ({error}); "
            "install it with pip install 't5forge[cloud]'"
        ) from None
    except Exception as error:  # noqa: BLE001 - botocore, gcsfs and aiohttp raise their own types
        raise StorageError(f"{text}: {_explain(error)}") from None


def _missing_bucket(error: BaseException) -> bool:
    return "bucket" in str(error).lower()


def _explain(error: BaseException) -> str:
    """One line for the failures users meet: credentials, refused access, an unreachable store."""
    name = type(error).__name__
    text = " ".join(str(error).split())[:300]
    if "Credentials" in name or "credentials" in text.lower():
        return (
            f"no credentials for the object store ({name}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (S3) or application-default credentials (GCS)"
        )
    if isinstance(error, PermissionError) or "AccessDenied" in text or "Forbidden" in text:
        return f"access denied ({text}); check the credentials' permissions on this bucket"
    if (
        "Connect" in name
        or "Endpoint" in name
        or isinstance(error, (ConnectionError, TimeoutError))
    ):
        return (
            f"the object store did not answer ({name}: {text}); check the network and, for an "
            "S3-compatible store, AWS_ENDPOINT_URL"
        )
    return f"{name}: {text}"
