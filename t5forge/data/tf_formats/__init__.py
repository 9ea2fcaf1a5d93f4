"""TensorFlow's file formats read without TensorFlow: TFRecord framing (records), the
tf.train.Example protobuf (example), SeqIO/TensorFlow feature specs (feature_specs), values
parsed by a feature description (parsing), and tf.data.TFRecordDataset (record_dataset)."""
