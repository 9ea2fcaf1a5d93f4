"""The user task module of the Romanian pretraining example (`--module_import`).

Registers `pretrain_romanian`: T5's span-corruption objective over a Romanian corpus read
through Hugging Face `datasets` with `streaming=True`, so the same module works for a corpus
far larger than memory. It is the pattern for pretraining on your own text: point the
source at your files (or a Hub dataset) and the vocabulary at the model you trained.

Environment:
  ROMANIAN_VOCAB        the SentencePiece model from `t5forge vocab train` (required)
  T5FORGE_DATA_DIR      folder holding romanian_corpus/{train,validation}.jsonl.gz
                        (default: ../shared/data beside the checkout)
  ROMANIAN_HF_DATASET   a Hub dataset name to stream instead of the local files
                        (it needs 'train' and 'validation' splits with a 'text' field)
"""

from __future__ import annotations

import os

from t5forge.data import (
    EnvironmentSentencePieceVocabulary,
    Feature,
    HuggingFaceSource,
    Task,
    TaskRegistry,
)
from t5forge.data import preprocessors as pp
from t5forge.tasks.builtin import CORPUS_SPLITS, EXTRA_IDS, default_data_dir

TASK_NAME = "pretrain_romanian"


def romanian_corpus_source() -> HuggingFaceSource:
    """The corpus as a streaming Hugging Face source: a Hub dataset or the local JSONL files."""
    hub_dataset = os.environ.get("ROMANIAN_HF_DATASET")
    if hub_dataset:
        return HuggingFaceSource(hub_dataset, streaming=True)
    folder = default_data_dir() / "romanian_corpus"
    files = {split: str(folder / f"{split}.jsonl.gz") for split in CORPUS_SPLITS}
    return HuggingFaceSource(data_files=files, streaming=True)


def pretrain_romanian_task() -> Task:
    """Documents' `text` -> tokens -> span-corrupted (inputs, targets) ending in EOS."""
    vocabulary = EnvironmentSentencePieceVocabulary(extra_ids=EXTRA_IDS, env_var="ROMANIAN_VOCAB")
    features = {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)}
    steps = [
        pp.rekey.bind(key_map={"inputs": None, "targets": "text"}),
        pp.tokenize,
        pp.span_corruption,
        pp.append_eos_after_trim,
    ]
    return Task(TASK_NAME, romanian_corpus_source(), steps, features)


TaskRegistry.remove(TASK_NAME)
TaskRegistry.add(pretrain_romanian_task())
