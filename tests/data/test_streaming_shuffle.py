"""A streaming split (TFDS TFRecord shards, tf.Example files) shuffles as SeqIO shuffles it:
file order per epoch, then a seeded shuffle buffer; deterministic and exactly resumable."""

import json

import numpy as np
import pytest

from t5forge.data import (
    ByteVocabulary,
    EncDecFeatureConverter,
    Feature,
    Task,
    TfdsDataSource,
    TFExampleDataSource,
    make_batch_iterator,
)
from t5forge.data.tf_formats import feature_specs as tf
from t5forge.errors import DataError
from tests.data.tf_reference import FIXTURES

VOCAB = ByteVocabulary()
FEATURES = {"inputs": Feature(VOCAB), "targets": Feature(VOCAB)}
SST2_TRAIN = 60  # glue/sst2 2.0.0 train: 3 TFRecord shards of 20
READ = {"inputs": tf.string, "targets": tf.string, "index": tf.int64}


def _sst2_features(example, rng):
    """Tokens plus a random draw, so a resumed run must also replay the preprocessor's RNG."""
    noise = int(rng.integers(1000))
    return {
        "inputs": VOCAB.encode(example["sentence"]),
        "targets": np.asarray([example["label"] + 3, noise % 200 + 3]),
        "idx": example["idx"],
    }


def _sst2_task(file_format="tfrecord", **kwargs):
    source = TfdsDataSource("glue/sst2:2.0.0", tfds_data_dir=str(FIXTURES / file_format))
    return Task(f"sst2_shuffle_{file_format}", source, [_sst2_features], FEATURES, **kwargs)


def _ids(dataset):
    return [int(x["idx"]) for x in dataset]


def test_two_epochs_read_every_example_twice_in_a_seeded_order():
    task = _sst2_task(shuffle_buffer_size=16)
    unshuffled = _ids(task.get_dataset("train", shuffle=False))
    two_epochs = _ids(task.get_dataset("train", seed=3, num_epochs=2))
    assert sorted(two_epochs) == sorted(unshuffled * 2)
    assert two_epochs[:SST2_TRAIN] != unshuffled
    assert two_epochs == _ids(task.get_dataset("train", seed=3, num_epochs=2))
    assert two_epochs != _ids(task.get_dataset("train", seed=4, num_epochs=2))


def _reviews_features(example):
    return {
        "inputs": VOCAB.encode(example["inputs"]),
        "targets": VOCAB.encode(example["targets"]),
        "index": example["index"],
    }


def test_file_order_changes_per_epoch():
    """Buffer 1 leaves the file order alone: each epoch reads both files interleaved,
    first file first or second file first, as the seed picks for that epoch."""
    source = TFExampleDataSource(
        {"train": str(FIXTURES / "tfexample" / "reviews-*.tfrecord")},
        {name: tf.FixedLenFeature([], dtype) for name, dtype in READ.items()},
    )
    task = Task("reviews_shuffle", source, [_reviews_features], FEATURES, shuffle_buffer_size=1)
    iterator = iter(task.get_dataset("train", seed=0, num_epochs=6))
    epochs = [tuple(int(next(iterator)["index"]) for _ in range(40)) for _ in range(6)]
    in_order = tuple(int(x["index"]) for x in source.split("train"))
    files_swapped = tuple((i + 20) % 40 for i in in_order)
    assert set(epochs) == {in_order, files_swapped}


def test_hosts_split_the_same_shuffled_stream():
    task = _sst2_task(shuffle_buffer_size=8)
    hosts = [_ids(task.get_dataset("train", seed=5, shard_index=i, num_shards=2)) for i in range(2)]
    assert sorted(hosts[0] + hosts[1]) == list(range(SST2_TRAIN))


@pytest.mark.parametrize("buffer_size", [1, 16, 100])
def test_a_resumed_iterator_continues_exactly(buffer_size):
    task = _sst2_task(shuffle_buffer_size=buffer_size)
    lengths = {"inputs": 32, "targets": 4}
    iterator = iter(task.get_dataset("train", sequence_length=lengths, seed=1, num_epochs=None))
    states, expected = [], []
    for _ in range(2 * SST2_TRAIN + 5):
        states.append(json.loads(json.dumps(iterator.get_state())))
        expected.append(next(iterator))
    for start in (0, 1, 17, SST2_TRAIN - 2, SST2_TRAIN, SST2_TRAIN + 9, 2 * SST2_TRAIN - 1):
        resumed = iter(task.get_dataset("train", sequence_length=lengths, seed=1, num_epochs=None))
        resumed.set_state(states[start])
        for want in expected[start : start + 5]:
            got = next(resumed)
            assert int(got["idx"]) == int(want["idx"])
            assert np.array_equal(got["inputs"], want["inputs"])
            assert np.array_equal(got["targets"], want["targets"])


def test_random_access_splits_do_not_use_the_buffer():
    """ArrayRecord is shuffled whole by index: the buffer size changes nothing."""
    small, large = _sst2_task("array_record", shuffle_buffer_size=2), _sst2_task("array_record")
    assert _ids(small.get_dataset("train", seed=2)) == _ids(large.get_dataset("train", seed=2))


def test_buffer_size_none_forbids_shuffling_a_streaming_split():
    task = _sst2_task(shuffle_buffer_size=None)
    assert len(_ids(task.get_dataset("train", shuffle=False))) == SST2_TRAIN
    with pytest.raises(DataError, match="shuffle_buffer_size=None"):
        task.get_dataset("train")
    assert len(_ids(task.get_dataset("train", shuffle_buffer_size=4))) == SST2_TRAIN
    with pytest.raises(DataError, match="whole number >= 1"):
        _sst2_task(shuffle_buffer_size=0)


def _batches(task, count, state=None, **options):
    """`count` packed batches as bytes (after restoring `state`) and the JSON state after."""
    with make_batch_iterator(
        task,
        "train",
        {"inputs": 32, "targets": 4},
        4,
        EncDecFeatureConverter(pack=True),
        9,
        num_epochs=None,
        **options,
    ) as iterator:
        if state is not None:
            iterator.set_state(state)
        taken = [{k: v.tobytes() for k, v in next(iterator).items()} for _ in range(count)]
        return taken, json.loads(json.dumps(iterator.get_state()))


def test_training_batches_resume_exactly_from_a_checkpointed_state():
    """What a SIGKILLed run restores (t5forge train's make_batch_iterator, its JSON state)."""
    task = _sst2_task(shuffle_buffer_size=32)
    uninterrupted, _ = _batches(task, 12)
    head, state = _batches(task, 5)
    tail, _ = _batches(task, 7, state=state)
    assert head + tail == uninterrupted
