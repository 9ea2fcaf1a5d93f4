"""`t5.data.tasks`: T5's tasks (t5 0.9.4's t5/data/tasks.py) over prepared TFDS directories.

Importing this module registers them, as importing T5's does. Each task reads its TFDS
dataset through t5forge's TensorFlow-free TfdsDataSource ($TFDS_DATA_DIR, T5X's
--tfds_data_dir), runs T5's preprocessors (t5forge.t5.data.preprocessors) and is scored with
T5's postprocessors and metrics; the SuperGLUE, DPR and WSC tasks also get T5's
`_1_sentinel` copies. xsum_v110 is the T5-paper follow-up's XSum task, here with
T5's default vocabulary. Registered: the c4 objectives, every GLUE and SuperGLUE config
T5 registers (WSC as T5's simplified train/eval pair, with DPR), CNN/DailyMail, SQuAD, XSum
and the WMT pairs T5 registers.
"""

from __future__ import annotations

from t5forge.data.preprocessors import CacheDatasetPlaceholder, append_eos_after_trim, tokenize
from t5forge.data.providers.mixture import TaskRegistry
from t5forge.data.providers.task import Feature, Task
from t5forge.data.providers.with_sentinels import add_task_with_sentinels
from t5forge.data.sources.tfds import TfdsDataSource
from t5forge.t5.data import glue_utils, postprocessors, preprocessors, tfds_configs
from t5forge.t5.data.utils import get_default_vocabulary
from t5forge.t5.evaluation import metrics

DEFAULT_OUTPUT_FEATURES = {
    "inputs": Feature(vocabulary=get_default_vocabulary(), add_eos=True, required=False),
    "targets": Feature(vocabulary=get_default_vocabulary(), add_eos=True),
}


def _add(name, tfds_name, text_preprocessors, *, splits=None, after_cache=(), **kwargs):
    """T5's recipe: text steps -> tokenize -> [cache] -> after_cache -> EOS after trimming."""
    TaskRegistry.remove(name)
    TaskRegistry.add(
        Task(
            name,
            TfdsDataSource(tfds_name=tfds_name, splits=splits),
            [
                *text_preprocessors,
                tokenize,
                CacheDatasetPlaceholder(),
                *after_cache,
                append_eos_after_trim,
            ],
            DEFAULT_OUTPUT_FEATURES,
            **kwargs,
        )
    )


_C4_TEXT = [preprocessors.rekey.bind(key_map={"inputs": None, "targets": "text"})]
_add(
    "c4_v220_span_corruption", "c4/en:2.2.0", _C4_TEXT, after_cache=[preprocessors.span_corruption]
)
_add("c4_v220_iid_denoising", "c4/en:2.2.0", _C4_TEXT, after_cache=[preprocessors.iid_denoising])
_add("c4_v220_prefix_lm", "c4/en:2.2.0", _C4_TEXT, after_cache=[preprocessors.prefix_lm])

for _config in tfds_configs.glue.Glue.builder_configs.values():
    _add(
        f"glue_{_config.name}_v002",
        f"glue/{_config.name}:1.0.0",
        [glue_utils.get_glue_text_preprocessor(_config)],
        splits=["test"] if _config.name == "ax" else None,
        metric_fns=glue_utils.get_glue_metric(_config.name),
        postprocess_fn=glue_utils.get_glue_postprocess_fn(_config),
    )

_add(
    "cnn_dailymail_v002",
    "cnn_dailymail:3.4.0",
    [preprocessors.summarize.bind(article_key="article", summary_key="highlights")],
    metric_fns=[metrics.rouge],
)

_WMT = [
    ("14", tfds_configs.wmt14.Wmt14Translate, "de-en"),
    ("14", tfds_configs.wmt14.Wmt14Translate, "fr-en"),
    ("16", tfds_configs.wmt16.Wmt16Translate, "ro-en"),
    ("15", tfds_configs.wmt15.Wmt15Translate, "fr-en"),
    ("19", tfds_configs.wmt19.Wmt19Translate, "de-en"),
]


def _add_translation(name: str, tfds_name: str, language_pair) -> None:
    """English to the pair's other language (TFDS pairs are (xx, 'en'))."""
    _add(
        name,
        tfds_name,
        [
            preprocessors.translate.bind(
                source_language=language_pair[1], target_language=language_pair[0]
            )
        ],
        metric_fns=[metrics.bleu],
    )


for _year, _builder, _pair in _WMT:
    _config = _builder.builder_configs[_pair]
    _target, _source = _config.language_pair
    _add_translation(
        f"wmt{_year}_{_source}{_target}_v003",
        f"wmt{_year}_translate/{_config.name}:1.0.0",
        _config.language_pair,
    )

_add_translation(
    "wmt_t2t_ende_v003",
    "wmt_t2t_translate/de-en:1.0.0",
    tfds_configs.wmt_t2t.WmtT2tTranslate.builder_configs["de-en"].language_pair,
)

for _config in tfds_configs.super_glue.SuperGlue.builder_configs.values():
    if "wsc" in _config.name:  # T5 uses the simplified WSC tasks below
        continue
    _text_steps = [glue_utils.get_glue_text_preprocessor(_config)]
    if _config.name == "axb":
        _text_steps.insert(
            0,
            preprocessors.rekey.bind(
                key_map={
                    "premise": "sentence1",
                    "hypothesis": "sentence2",
                    "label": "label",
                    "idx": "idx",
                }
            ),
        )
    _add(
        f"super_glue_{_config.name}_v102",
        f"super_glue/{_config.name}:1.0.2",
        _text_steps,
        splits=["test"] if _config.name in ("axb", "axg") else None,
        metric_fns=glue_utils.get_super_glue_metric(_config.name),
        postprocess_fn=glue_utils.get_glue_postprocess_fn(_config),
    )
    add_task_with_sentinels(f"super_glue_{_config.name}_v102", num_sentinels=1)

_add(
    "dpr_v001_simple",
    "definite_pronoun_resolution:1.1.0",
    [preprocessors.definite_pronoun_resolution_simple],
    metric_fns=[metrics.accuracy],
)
_add(
    "super_glue_wsc_v102_simple_train",
    "super_glue/wsc.fixed:1.0.2",
    [preprocessors.wsc_simple.bind(correct_referent_only=True)],
    splits=["train"],
)
_add(
    "super_glue_wsc_v102_simple_eval",
    "super_glue/wsc.fixed:1.0.2",
    [preprocessors.wsc_simple.bind(correct_referent_only=False)],
    splits=["validation", "test"],
    postprocess_fn=postprocessors.wsc_simple,
    metric_fns=[metrics.accuracy],
)
for _name in (
    "dpr_v001_simple",
    "super_glue_wsc_v102_simple_train",
    "super_glue_wsc_v102_simple_eval",
):
    add_task_with_sentinels(_name, num_sentinels=1)

_add(
    "squad_v010_allanswers",
    "squad/v1.1:3.0.0",
    [preprocessors.squad],
    postprocess_fn=postprocessors.qa,
    metric_fns=[metrics.squad],
)
_add(
    "squad_v010_context_free",
    "squad/v1.1:3.0.0",
    [preprocessors.squad.bind(include_context=False)],
    postprocess_fn=postprocessors.qa,
    metric_fns=[metrics.squad],
)
_add("squad_v010", "squad/v1.1:3.0.0", [preprocessors.squad], metric_fns=[metrics.squad])

_add(
    "xsum_v110",
    "xsum:1.1.0",
    [preprocessors.summarize.bind(article_key="document", summary_key="summary")],
    metric_fns=[metrics.rouge],
)
