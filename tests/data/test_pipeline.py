"""make_batch_iterator: determinism, exact resume (task, mixture, packing, workers), padding."""

import json

import numpy as np
import pytest

from t5forge.data import EncDecFeatureConverter, Mixture, make_batch_iterator
from t5forge.errors import ConfigError
from t5forge.tasks.builtin import translation_task

LENGTHS = {"inputs": 256, "targets": 16}


@pytest.fixture(scope="module")
def sentiment(make_sentiment_task, spm_vocabulary):
    return make_sentiment_task("pipeline_sentiment", spm_vocabulary)


@pytest.fixture(scope="module")
def mixture(shared_data, spm_vocabulary, sentiment):
    translation = translation_task(
        "pipeline_en_de", shared_data, "en_de_lohelp", "en", "de", spm_vocabulary
    )
    return Mixture("pipeline_mixture", [(sentiment, 1.0), (translation, 3.0)])


def batches(task, count, state=None, **kwargs):
    """`count` batches (after restoring `state`, if given) and the state after them."""
    options = dict(
        split="validation",
        task_feature_lengths=LENGTHS,
        batch_size=4,
        converter=EncDecFeatureConverter(pack=True),
        seed=7,
        num_epochs=None,
    )
    options.update(kwargs)
    with make_batch_iterator(task, **options) as iterator:
        if state is not None:
            iterator.set_state(state)
        taken = [next(iterator) for _ in range(count)]
        return taken, json.loads(json.dumps(iterator.get_state()))


def as_bytes(batch_list):
    return [
        {name: (v.dtype.str, v.shape, v.tobytes()) for name, v in b.items()} for b in batch_list
    ]


def test_batches_are_int32_with_the_converter_shapes(sentiment):
    (batch,), _ = batches(sentiment, 1)
    assert {name: (v.dtype, v.shape) for name, v in batch.items()} == {
        name: (np.dtype(np.int32), (4, length))
        for name, length in EncDecFeatureConverter(pack=True).model_feature_lengths(LENGTHS).items()
    }
    assert batch["encoder_segment_ids"].max() > 1  # short reviews do get packed


def test_same_seed_gives_byte_identical_batches_and_another_seed_differs(sentiment):
    first, _ = batches(sentiment, 4)
    again, _ = batches(sentiment, 4)
    other, _ = batches(sentiment, 4, seed=8)
    assert as_bytes(first) == as_bytes(again)
    assert as_bytes(first) != as_bytes(other)


@pytest.mark.parametrize("pack", [True, False])
def test_resume_mid_epoch_of_a_mixture_continues_exactly(mixture, pack):
    converter = EncDecFeatureConverter(pack=pack)
    uninterrupted, _ = batches(mixture, 9, converter=converter)
    head, state = batches(mixture, 4, converter=converter)
    tail, _ = batches(mixture, 5, state=state, converter=converter)
    assert as_bytes(head + tail) == as_bytes(uninterrupted)


def test_resume_with_a_worker_process_and_a_prefetch_thread(sentiment):
    """One worker reads the whole shard, so it must also match the in-process batches."""
    in_process, _ = batches(sentiment, 6)
    head, state = batches(sentiment, 3, worker_count=1, prefetch_buffer_size=2)
    tail, _ = batches(sentiment, 3, state=state, worker_count=1, prefetch_buffer_size=2)
    assert as_bytes(head + tail) == as_bytes(in_process)


def test_eval_pads_the_last_batch_and_training_drops_it(sentiment):
    unpacked = EncDecFeatureConverter(pack=False)
    eval_options = dict(converter=unpacked, shuffle=False, num_epochs=1, batch_size=64)
    with make_batch_iterator(sentiment, "validation", LENGTHS, seed=0, **eval_options) as it:
        eval_batches = list(it)
    assert len(eval_batches) == 16  # 1000 reviews = 15 full batches of 64 + 40 real rows
    last = eval_batches[-1]
    real_rows = last["decoder_loss_weights"].sum(axis=1) > 0
    assert real_rows.tolist() == [True] * 40 + [False] * 24
    assert not last["encoder_input_tokens"][40:].any()

    train_options = dict(eval_options, shuffle=True)
    with make_batch_iterator(sentiment, "validation", LENGTHS, seed=0, **train_options) as it:
        assert len(list(it)) == 15


def test_shards_split_the_examples_between_processes(sentiment):
    unpacked = EncDecFeatureConverter(pack=False)
    rows = []
    for shard_index in range(2):
        with make_batch_iterator(
            sentiment,
            "validation",
            LENGTHS,
            batch_size=100,
            converter=unpacked,
            seed=0,
            shard_index=shard_index,
            num_shards=2,
            shuffle=False,
            num_epochs=1,
        ) as iterator:
            rows.append({r.tobytes() for b in iterator for r in b["encoder_input_tokens"]})
    assert len(rows[0]) > 400 and len(rows[1]) > 400
    assert len(rows[0] & rows[1]) < 10  # only reviews that happen to be identical


def test_bad_batch_size_is_a_config_error(sentiment):
    with pytest.raises(ConfigError, match="batch_size must be at least 1"):
        make_batch_iterator(sentiment, "validation", LENGTHS, 0, EncDecFeatureConverter(), 0)
