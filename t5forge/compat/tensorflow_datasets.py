"""`import tensorflow_datasets as tfds` in a task module: TFDS's names task modules use
(`tfds.Split`, the builder configs T5's registry reads: `tfds.text.glue.Glue.builder_configs`,
`tfds.translate.wmt_t2t.WmtT2tTranslate.builder_configs[...]`), and one error for the rest
(TFDS's builders need TensorFlow; t5forge reads prepared TFDS directories through
seqio.TfdsDataSource)."""

from __future__ import annotations

import types

from t5forge.errors import DataError
from t5forge.t5.data import tfds_configs


class Split:
    """TFDS's split names."""

    TRAIN = "train"
    VALIDATION = "validation"
    TEST = "test"


text = types.SimpleNamespace(glue=tfds_configs.glue, super_glue=tfds_configs.super_glue)
translate = types.SimpleNamespace(
    wmt14=tfds_configs.wmt14,
    wmt15=tfds_configs.wmt15,
    wmt16=tfds_configs.wmt16,
    wmt19=tfds_configs.wmt19,
    wmt_t2t=tfds_configs.wmt_t2t,
)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def unsupported(*args, **kwargs):
        raise DataError(
            f"tfds.{name} needs TensorFlow; prepare the dataset once with `tfds build` "
            "where TensorFlow is installed and read it with "
            "seqio.TfdsDataSource(tfds_name=..., tfds_data_dir=...) or --tfds_data_dir"
        )

    return unsupported
