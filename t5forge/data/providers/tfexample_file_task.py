"""T5X's `infer.create_task_from_tfexample_file` (what `infer_from_tfexample_file.gin` binds):
an ad-hoc task over TFRecord files of tf.Examples holding UTF-8 text, split 'infer'.

As in T5X: the paths must match files, the task is named `infer_<md5 of the paths and keys>`
(so the same call gives the same task), the text features are renamed to inputs/targets,
then tokenized with EOS. 'recordio' and 'sstable' are Google-internal formats.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping, Sequence

from t5forge import storage
from t5forge.data import preprocessors
from t5forge.data.providers.mixture import TaskRegistry
from t5forge.data.providers.task import Feature
from t5forge.data.sources.files import TFExampleDataSource
from t5forge.data.tf_formats.feature_specs import FixedLenFeature, string
from t5forge.errors import DataError


def create_task_from_tfexample_file(
    paths: Sequence[str],
    file_type: str,
    inputs_key: str,
    targets_key: str | None,
    features: Mapping[str, Feature],
    task_id: str | None = None,
) -> str:
    """Registers the task and returns its name (T5X's arguments and naming)."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    if file_type != "tfrecord":
        raise DataError(
            f"create_task_from_tfexample_file: file_type {file_type!r} is not readable outside "
            "Google ('recordio' and 'sstable' are internal formats); write TFRecord files "
            "and set TF_EXAMPLE_FILE_TYPE = 'tfrecord'"
        )
    if not any(storage.glob(path) for path in paths):
        raise DataError(f"create_task_from_tfexample_file: no file matches {paths}")
    description = {inputs_key: FixedLenFeature([], string)}
    if targets_key:
        description[targets_key] = FixedLenFeature([], string)
    if task_id is None:
        key = ":".join([*paths, inputs_key, targets_key or ""])
        task_id = hashlib.md5(key.encode()).hexdigest()[:10]
    name = f"infer_{task_id}"
    TaskRegistry.remove(name)
    TaskRegistry.add(
        name,
        TFExampleDataSource({"infer": paths}, feature_description=description),
        preprocessors=[
            functools.partial(
                preprocessors.rekey, key_map={"inputs": inputs_key, "targets": targets_key}
            ),
            functools.partial(preprocessors.tokenize, with_eos=True),
        ],
        output_features=features,
    )
    return name
