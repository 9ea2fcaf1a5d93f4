"""Prepared TensorFlow Datasets directories, read without TensorFlow (see source.py)."""

from t5forge.data.sources.tfds.source import TfdsDataSource, set_tfds_data_dir_override

__all__ = ["TfdsDataSource", "set_tfds_data_dir_override"]
