"""The `classify_sentiment` task: Rotten Tomatoes reviews as text-to-text classification.

'sentiment: <review>' -> 'fresh' | 'rotten'. Both labels are single tokens of the vocabulary
(train it with `t5forge vocab train --whole_words fresh,rotten`), so the task declares them
as `single_token_labels`: evaluation and `t5forge infer` score just those two tokens in one
decoder step and take the argmax on device instead of decoding. Long reviews keep their first
and last tokens. Import with `--module_import=examples.classify_sentiment.tasks`; the
vocabulary is $T5FORGE_VOCAB and the data $T5FORGE_DATA_DIR/rotten_tomatoes.
"""

import functools

from t5forge.data import metrics
from t5forge.data import preprocessors as pp
from t5forge.data.tasks import Feature, Task, TaskRegistry
from t5forge.data.vocabularies import EnvironmentSentencePieceVocabulary
from t5forge.tasks.builtin import default_data_dir, jsonl_splits

TASK_NAME = "classify_sentiment"
LABELS = ("fresh", "rotten")
# Reviews longer than the inputs length keep this many tokens from their end (the rest from
# their start): a verdict often sits in the last words.
TAIL_TOKENS = 24


def sentiment_task(vocabulary=None, data_dir=None) -> Task:
    """The task over `<data_dir>/rotten_tomatoes`, with the given (or $T5FORGE_VOCAB) vocabulary."""
    vocabulary = vocabulary or EnvironmentSentencePieceVocabulary()
    features = {"inputs": Feature(vocabulary), "targets": Feature(vocabulary)}
    steps = [
        pp.classify.bind(text_key="text", label_key="label", prefix="sentiment"),
        pp.tokenize,
        pp.CacheDatasetPlaceholder(),
        pp.truncate_head_and_tail.bind(tail_tokens=TAIL_TOKENS),
        pp.append_eos_after_trim,
    ]
    return Task(TASK_NAME, jsonl_splits(data_dir or default_data_dir(), "rotten_tomatoes"),
                steps, features,
                metric_fns=[metrics.accuracy, functools.partial(metrics.f1, average="macro")],
                single_token_labels=LABELS)


TaskRegistry.remove(TASK_NAME)
TaskRegistry.add(sentiment_task())
