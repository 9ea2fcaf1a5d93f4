"""Fine-tuning tasks of examples/pretrain_ul2: Rotten Tomatoes sentiment, plain or with a mode.

`classify_sentiment` is examples/classify_sentiment's task (imported, so registered);
`classify_sentiment_nlu` is the same with UL2's mode token `[NLU]` put before the tokenized
inputs, the ids ul2_objective put before the R denoisers' inputs in pretraining. Import with
`--module_import=examples.pretrain_ul2.tasks` (finetune.gin does); vocabulary
$T5FORGE_VOCAB, data $T5FORGE_DATA_DIR/rotten_tomatoes.
"""

from examples.classify_sentiment.tasks import TASK_NAME, sentiment_task
from t5forge.data import Task, TaskRegistry
from t5forge.data import preprocessors as pp

MODE = "[NLU]"
MODE_TASK_NAME = f"{TASK_NAME}_nlu"


def sentiment_task_with_mode(mode: str = MODE, vocabulary=None, data_dir=None) -> Task:
    """The sentiment task with `mode` before the inputs (inside the inputs length)."""
    base = sentiment_task(vocabulary, data_dir)
    steps = list(base.preprocessors)
    cache = next(i for i, s in enumerate(steps) if isinstance(s, pp.CacheDatasetPlaceholder))
    steps.insert(cache + 1, pp.prepend_prompt.bind(prompt_mode=mode))
    return Task(
        MODE_TASK_NAME,
        base.source,
        steps,
        base.output_features,
        metric_fns=base.metric_fns,
        single_token_labels=base.single_token_labels,
    )


TaskRegistry.remove(MODE_TASK_NAME)
TaskRegistry.add(sentiment_task_with_mode())
