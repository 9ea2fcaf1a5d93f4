"""`t5.data.glue_utils`: which T5 preprocessor, postprocessor, metrics and mixing weight
each GLUE and SuperGLUE config gets (T5's tables)."""

from __future__ import annotations

import functools

from t5forge.t5.data import postprocessors, preprocessors
from t5forge.t5.evaluation import metrics

SUPER_GLUE_WEIGHT_MAPPING = {
    "dpr_v001_simple": 1_322.0,
    "super_glue_wsc_v102_simple_train": 259.0,
    "super_glue_wsc_v102_simple_eval": 0.0,
    "super_glue_boolq_v102": 9_427.0,
    "super_glue_cb_v102": 250.0,
    "super_glue_copa_v102": 400.0,
    "super_glue_multirc_v102": 27_243.0,
    "super_glue_record_v102": 138_854.0,
    "super_glue_rte_v102": 2_490.0,
    "super_glue_wic_v102": 5_428.0,
    "super_glue_axb_v102": 0.0,
    "super_glue_axg_v102": 0.0,
}

SUPER_GLUE_WEIGHT_MAPPING_SENTINEL = {
    "dpr_v001_simple_1_sentinel": 1_322.0,
    "super_glue_wsc_v102_simple_1_sentinel_train": 259.0,
    "super_glue_wsc_v102_simple_1_sentinel_eval": 0.0,
    "super_glue_boolq_v102_1_sentinel": 9_427.0,
    "super_glue_cb_v102_1_sentinel": 250.0,
    "super_glue_copa_v102_1_sentinel": 400.0,
    "super_glue_multirc_v102_1_sentinel": 27_243.0,
    "super_glue_record_v102_1_sentinel": 138_854.0,
    "super_glue_rte_v102_1_sentinel": 2_490.0,
    "super_glue_wic_v102_1_sentinel": 5_428.0,
    "super_glue_axb_v102_1_sentinel": 0.0,
    "super_glue_axg_v102_1_sentinel": 0.0,
}

GLUE_WEIGHT_MAPPING = {
    "glue_cola_v002": 8_551.0,
    "glue_sst2_v002": 67_349.0,
    "glue_mrpc_v002": 3_668.0,
    "glue_qqp_v002": 363_849.0,
    "glue_stsb_v002": 5_749.0,
    "glue_mnli_v002": 392_702.0,
    "glue_qnli_v002": 104_743.0,
    "glue_rte_v002": 2_490.0,
    "glue_mnli_mismatched_v002": 0.0,
    "glue_mnli_matched_v002": 0.0,
    "glue_ax_v002": 0.0,
}


def get_glue_weight_mapping() -> dict[str, float]:
    return GLUE_WEIGHT_MAPPING


def get_super_glue_weight_mapping() -> dict[str, float]:
    return SUPER_GLUE_WEIGHT_MAPPING


def get_super_glue_weight_mapping_sentinel() -> dict[str, float]:
    return SUPER_GLUE_WEIGHT_MAPPING_SENTINEL


def get_glue_text_preprocessor(builder_config):
    """stsb, wsc.fixed and record have their own; the rest are `glue` with the benchmark
    name (the diagnostics read as MNLI or RTE) and, for multirc and wic, a feature order."""
    name = builder_config.name
    special = {"stsb": preprocessors.stsb, "wsc.fixed": preprocessors.wsc, "record": None}
    if name in special:
        return special[name] or preprocessors.record
    if "mnli" in name or name == "ax":
        benchmark = "mnli"
    elif name in ("axb", "axg"):
        benchmark = "rte"
    else:
        benchmark = name
    feature_names = {
        "multirc": ("question", "answer", "paragraph"),
        "wic": ("sentence1", "sentence2", "word"),
    }.get(name)
    return preprocessors.glue.bind(
        benchmark_name=benchmark,
        label_names=builder_config.label_classes,
        feature_names=feature_names,
    )


def get_glue_postprocess_fn(builder_config):
    special = {
        "stsb": postprocessors.string_to_float,
        "multirc": postprocessors.multirc,
        "record": postprocessors.record,
    }
    if builder_config.name in special:
        return special[builder_config.name]
    return functools.partial(
        postprocessors.string_label_to_class_id, label_classes=builder_config.label_classes
    )


GLUE_METRICS = {
    "cola": [metrics.matthews_corrcoef_x100()],
    "sst2": [metrics.accuracy],
    "mrpc": [metrics.f1_score_with_invalid, metrics.accuracy],
    "stsb": [metrics.pearson_corrcoef, metrics.spearman_corrcoef],
    "qqp": [metrics.f1_score_with_invalid, metrics.accuracy],
    "mnli": [metrics.accuracy],
    "mnli_matched": [metrics.accuracy],
    "mnli_mismatched": [metrics.accuracy],
    "qnli": [metrics.accuracy],
    "rte": [metrics.accuracy],
    "wnli": [metrics.accuracy],
    "ax": [],  # test split only
}

SUPERGLUE_METRICS = {
    "boolq": [metrics.accuracy],
    "cb": [metrics.mean_multiclass_f1(num_classes=3), metrics.accuracy],
    "copa": [metrics.accuracy],
    "multirc": [
        metrics.multirc_f1_over_all_answers,
        metrics.mean_group_metric(metrics.all_match),
    ],
    "record": [metrics.deduplicate_metric(metrics.squad)],
    "rte": [metrics.accuracy],
    "wic": [metrics.accuracy],
    "axb": [],  # test split only
    "axg": [],
}


def get_glue_metric(task_name: str) -> list:
    return GLUE_METRICS[task_name]


def get_super_glue_metric(task_name: str) -> list:
    return SUPERGLUE_METRICS[task_name]
