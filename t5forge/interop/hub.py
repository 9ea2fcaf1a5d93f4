"""Hugging Face hub ids as checkpoint paths: `hf://org/name[@revision]`, or `org/name` where a
user names a Hugging Face model (`t5forge.load`, `t5forge convert --from hf`).

Every Hugging Face user already has a hub cache, so an id is looked up in this order: a local
path of that name (always wins), the hub cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`, else
~/.cache/huggingface/hub, laid out by huggingface_hub), then a download into that cache unless
`HF_HUB_OFFLINE` forbids it. The environment is read at each call, not when huggingface_hub is
imported, so a process may go offline (or point at another cache) after start-up.

Bare ids are taken only where a Hugging Face model is expected: in a gin path
(INITIAL_CHECKPOINT_PATH, CHECKPOINT_PATH) a mistyped relative run directory such as
`runs/checkpoint_100` must stay a "does not exist" line, not a hub lookup, so there the id is
spelled `hf://org/name`. A download fetches what t5forge reads: config.json, the SentencePiece
and tokenizer settings, and the weights as safetensors or, where a repository has none,
pytorch_model.bin (never TF or Flax weights).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

from t5forge.errors import CheckpointError, ConfigError, StorageError

SCHEME = "hf://"
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = ("1", "true", "yes", "on")
# What t5forge reads from a model repository besides its weights.
_SETTINGS = [
    "config.json",
    "generation_config.json",
    "spiece.model",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
_SAFETENSORS = ["model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors"]
_PYTORCH = ["pytorch_model.bin"]


@dataclasses.dataclass(frozen=True)
class HubId:
    """A model repository on the hub and the revision (branch, tag or commit) to read."""

    repo_id: str
    revision: str | None = None

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")


def parse(location, bare_ids: bool = False) -> HubId | None:
    """The hub id `location` names, or None for a local path or another URL.

    `hf://` always names an id (a malformed one is a ConfigError); with `bare_ids`, so does a
    string `org/name[@revision]` that is no existing local path.
    """
    if not isinstance(location, str):
        return None  # a Path object is a path
    if location.startswith(SCHEME):
        hub_id = _split(location[len(SCHEME) :])
        if hub_id is None:
            raise ConfigError(
                f"{location} is not a Hugging Face hub id; write hf://org/name or "
                f"hf://org/name@revision"
            )
        return hub_id
    if not bare_ids or "://" in location or os.path.lexists(location):
        return None
    hub_id = _split(location)
    return hub_id if hub_id is not None and "/" in hub_id.repo_id else None


def _split(text: str) -> HubId | None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    repo_id, at, revision = text.partition("@")
    if at and not revision:
        return None
    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return None
    return HubId(repo_id, revision or None)


def local_path(location, bare_ids: bool = False):
    """`location` unchanged, or the cached snapshot directory of the hub id it names."""
    hub_id = parse(location, bare_ids)
    if hub_id is None:
        return location
    return str(snapshot(hub_id, bare=not location.startswith(SCHEME)))


def cache_dir() -> Path:
    """The hub cache huggingface_hub would use with this process's environment now."""
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(variable):
            return _expand(os.environ[variable])
    if os.environ.get("HF_HOME"):
        return _expand(os.environ["HF_HOME"]) / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return _expand(xdg) / "huggingface" / "hub"


def _expand(text: str) -> Path:
    return Path(os.path.expanduser(os.path.expandvars(text)))


def offline_setting() -> str | None:
    """The variable forbidding the network now (HF_HUB_OFFLINE, or transformers'
    TRANSFORMERS_OFFLINE) as `NAME=value`, None when downloads are allowed."""
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        if os.environ.get(name, "").strip().lower() in _TRUE:
            return f"{name}={os.environ[name].strip()}"
    return None


def snapshot(hub_id: HubId, bare: bool = False) -> Path:
    """The directory holding `hub_id`'s files: its cached snapshot, else a fresh download.

    `bare` says the id came without hf://, so a failure also says it is no local path.
    """
    cache = cache_dir()
    cached = _cached_snapshot(hub_id, cache)
    if cached is not None:
        return cached
    setting = offline_setting()
    if setting is not None:
        raise _not_cached(hub_id, cache, bare, f"{setting} forbids downloading it")
    return _download(hub_id, cache, bare)


def _cached_snapshot(hub_id: HubId, cache: Path) -> Path | None:
    """The snapshot of `hub_id` in `cache` when it holds config.json and whole weights."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(
        hub_id.repo_id, "config.json", cache_dir=cache, revision=hub_id.revision
    )
    if not isinstance(config, str):
        return None
    folder = Path(config).parent
    return folder if _has_weights(folder) else None


def _has_weights(folder: Path) -> bool:
    """True when `folder` holds model.safetensors, every shard its index names, or
    pytorch_model.bin: what t5forge's Hugging Face reader reads."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text()).get("weight_map", {}).values())
        except (ValueError, AttributeError):  # a damaged index: the snapshot is not whole
            return False
        return bool(shards) and all((folder / shard).is_file() for shard in shards)
    return (folder / "model.safetensors").is_file() or (folder / "pytorch_model.bin").is_file()


def _download(hub_id: HubId, cache: Path, bare: bool) -> Path:
    """Downloads the settings and the safetensors weights (else pytorch_model.bin) of `hub_id`
    into `cache`, as `hf download` would lay them out; hub refusals are one line each."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        OfflineModeIsEnabled,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    try:
        for weights in (_SAFETENSORS, _PYTORCH):
            folder = Path(
                snapshot_download(
                    hub_id.repo_id,
                    revision=hub_id.revision,
                    cache_dir=cache,
                    endpoint=endpoint,
                    allow_patterns=_SETTINGS + weights,
                )
            )
            if _has_weights(folder):
                return folder
    except GatedRepoError:
        raise StorageError(
            f"{hub_id} is a gated Hugging Face repository: accept its terms at "
            f"{endpoint}/{hub_id.repo_id}, log in with `hf auth login` (or set HF_TOKEN), "
            f"and load it again"
        ) from None
    except RevisionNotFoundError:
        raise CheckpointError(
            f"{hub_id.repo_id} has no revision {hub_id.revision!r} on {endpoint}; name a "
            f"branch, tag or commit it has"
        ) from None
    except RepositoryNotFoundError:
        where = "no local path and " if bare else ""
        raise CheckpointError(
            f"{hub_id} is {where}no model on {endpoint} (or a private one): check the id, or "
            f"log in with `hf auth login` if it is yours"
        ) from None
    except (LocalEntryNotFoundError, OfflineModeIsEnabled) as error:
        cause = type(error.__cause__ or error).__name__
        raise _not_cached(
            hub_id, cache, bare, f"{endpoint} could not be reached ({cause})"
        ) from None
    except HfHubHTTPError as error:
        status = error.response.status_code if error.response is not None else "no"
        raise StorageError(
            f"{endpoint} refused {hub_id} (HTTP {status}); try again later, or fill the cache "
            f"{cache} with `hf download {hub_id.repo_id}` elsewhere"
        ) from None
    except OSError as error:  # a full disk, a read-only cache, a dropped connection
        first_line = (str(error) or type(error).__name__).splitlines()[0]
        raise StorageError(
            f"downloading {hub_id} from {endpoint} into {cache} failed: {first_line}; free "
            f"space, point HF_HUB_CACHE at a writable directory, or try again"
        ) from None
    raise CheckpointError(
        f"{hub_id} on {endpoint} holds no model.safetensors or pytorch_model.bin; t5forge "
        f"reads transformers' PyTorch weights, not TF or Flax ones"
    )


def _not_cached(hub_id: HubId, cache: Path, bare: bool, reason: str) -> CheckpointError:
    """The one line for an id neither cached nor downloadable: how to fill the cache."""
    where = "no local path, and as a hub id it is " if bare else ""
    revision = f" --revision {hub_id.revision}" if hub_id.revision else ""
    folder = "models--" + hub_id.repo_id.replace("/", "--")
    return CheckpointError(
        f"{hub_id} is {where}not in the Hugging Face cache {cache} and {reason}; on a "
        f"machine with network run `hf download {hub_id.repo_id}{revision}` and copy its "
        f"{folder} folder into {cache} (or point HF_HUB_CACHE at a cache that has it)"
    )
