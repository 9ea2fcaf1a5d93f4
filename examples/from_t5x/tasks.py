"""A SeqIO task module as a T5X user writes one: German to English over en_de_lohelp.

It imports `seqio`, `t5.data.preprocessors` and `t5.evaluation.metrics` as it would under
T5X; t5forge stands in for those packages while it imports the module (README, "Task
modules, TFDS data and T5's tasks"). The one change from a tf.data module: the
FunctionDataSource's function returns the examples as Python dicts.
"""

import functools
import gzip
import json
import os

import seqio
from t5.data import preprocessors
from t5.evaluation import metrics

DATA_DIR = os.environ.get("T5FORGE_DATA_DIR", "../shared/data")
vocabulary = seqio.SentencePieceVocabulary(os.environ["T5FORGE_VOCAB"])
output_features = {
    "inputs": seqio.Feature(vocabulary=vocabulary),
    "targets": seqio.Feature(vocabulary=vocabulary),
}


def lohelp(split, shuffle_files=False):
    """The {'en': ..., 'de': ...} rows of one split of the LibreOffice help translations."""
    with gzip.open(os.path.join(DATA_DIR, "en_de_lohelp", f"{split}.jsonl.gz"), "rt") as rows:
        return [json.loads(row) for row in rows]


seqio.TaskRegistry.add(
    "lohelp_de_en",
    source=seqio.FunctionDataSource(lohelp, splits=["train", "validation", "test"]),
    preprocessors=[
        functools.partial(preprocessors.translate, source_language="de", target_language="en"),
        seqio.preprocessors.tokenize,
        seqio.CacheDatasetPlaceholder(),
        seqio.preprocessors.append_eos_after_trim,
    ],
    metric_fns=[metrics.bleu],
    output_features=output_features,
)
