"""Where a vocabulary named by a bucket path is read on a machine that cannot reach the bucket.

T5X users' task modules and gin files name T5's vocabularies by their bucket paths
(`gs://t5-data/vocabs/cc_all.32000/sentencepiece.model`). `T5FORGE_VOCAB_MAP` maps a path
prefix to a local folder holding a copy of what is under it, so the user's own file runs
unchanged: with `T5FORGE_VOCAB_MAP=gs://t5-data/vocabs=/data/t5-vocabs` that vocabulary is read
from `/data/t5-vocabs/cc_all.32000/sentencepiece.model`. Several mappings are separated by
commas; the longest matching prefix wins. Every SentencePiece vocabulary goes through it: those
task modules and gin files name, T5's default one, and the file `T5FORGE_VOCAB` names (which
chooses the built-in tasks' vocabulary; this says where a bucket's files are found).
"""

from __future__ import annotations

import os

from t5forge.errors import ConfigError

VOCAB_MAP_VARIABLE = "T5FORGE_VOCAB_MAP"
EXAMPLE = f"{VOCAB_MAP_VARIABLE}=gs://t5-data/vocabs=/data/t5-vocabs"


def _mappings() -> list[tuple[str, str]]:
    """(prefix, local folder) pairs of $T5FORGE_VOCAB_MAP, longest prefix first."""
    pairs = []
    for entry in filter(
        None, (e.strip() for e in os.environ.get(VOCAB_MAP_VARIABLE, "").split(","))
    ):
        prefix, _, folder = entry.partition("=")
        if not prefix.strip() or not folder.strip():
            raise ConfigError(
                f"{VOCAB_MAP_VARIABLE} entry {entry!r} is not PREFIX=FOLDER; write e.g. {EXAMPLE}"
            )
        pairs.append((prefix.strip().rstrip("/"), folder.strip()))
    return sorted(pairs, key=lambda pair: len(pair[0]), reverse=True)


def mapped_location(path: str) -> str:
    """Where `path` is read: under the local folder of the longest matching prefix of
    $T5FORGE_VOCAB_MAP (on a path-component boundary; a prefix that is the whole path maps
    the file itself), else `path` itself."""
    for prefix, folder in _mappings():
        if path == prefix:
            return folder
        if path.startswith(prefix + "/"):
            return os.path.join(folder, path[len(prefix) + 1 :])
    return path


def offline_hint(url: str) -> str:
    """What to do when a vocabulary's bucket cannot be read from this machine."""
    folder = url.rsplit("/", 1)[0]
    return (
        f"on a machine without access, copy the file and map its folder to the copy: "
        f"{VOCAB_MAP_VARIABLE}={folder}=/local/folder"
    )
