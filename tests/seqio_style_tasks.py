"""A task module written in SeqIO's style; porting it from SeqIO changed one line, the import
(`import seqio` -> `from t5forge import seqio`). It registers the name T5X's WMT example gin
files bind, `wmt_t2t_ende_v003`, on a small slice of the bundled English-German data
(tests/test_seqio.py registers and runs it). The vocabulary comes from
$T5FORGE_VOCAB (the tests' tiny SentencePiece model).
"""

import functools
import gzip
import json
import os
from pathlib import Path

from t5forge import seqio

DATA = Path(__file__).resolve().parents[1] / "t5forge" / "tasks" / "data" / "en_de_lohelp"
ROWS = {"train": 256, "validation": 16}


def en_de_rows(split, shuffle_files=False, seed=None):
    path = DATA / ("validation.jsonl.gz" if split == "validation" else "train.jsonl.gz")
    with gzip.open(path, "rt") as f:
        rows = [json.loads(line) for _, line in zip(range(ROWS[split]), f)]
    return [{"en": row["en"], "de": row["de"]} for row in rows]


@seqio.map_over_dataset
def to_inputs_and_targets(ex):
    return {"inputs": "translate English to German: " + ex["en"], "targets": ex["de"]}


def exact_match(targets, predictions):
    return {
        "exact_match": 100.0
        * sum(t == p for t, p in zip(targets, predictions))
        / max(len(targets), 1)
    }


VOCABULARY = seqio.SentencePieceVocabulary(os.environ["T5FORGE_VOCAB"])
OUTPUT_FEATURES = {
    "inputs": seqio.Feature(vocabulary=VOCABULARY, add_eos=True),
    "targets": seqio.Feature(vocabulary=VOCABULARY, add_eos=True),
}

seqio.TaskRegistry.remove("wmt_t2t_ende_v003")
seqio.TaskRegistry.add(
    "wmt_t2t_ende_v003",
    source=seqio.FunctionDataSource(en_de_rows, splits=["train", "validation"]),
    preprocessors=[
        functools.partial(seqio.preprocessors.rekey, key_map={"en": "en", "de": "de"}),
        to_inputs_and_targets,
        seqio.preprocessors.tokenize,
        seqio.CacheDatasetPlaceholder(),
        seqio.preprocessors.append_eos_after_trim,
    ],
    output_features=OUTPUT_FEATURES,
    metric_fns=[exact_match, seqio.metrics.bleu],
)

seqio.MixtureRegistry.remove("wmt_ende_mix")
seqio.MixtureRegistry.add("wmt_ende_mix", [("wmt_t2t_ende_v003", 1.0)])
