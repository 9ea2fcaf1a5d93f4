"""A server start compiles (or loads) its programs and nothing else: the host arrays it passes
them, in every bucket's shape, reach the device without a small compile of their own (a
restart of T5 1.1 small compiled ~45 such, serially, before it was ready)."""

import dataclasses

import numpy as np
from server_helpers import TEST_SETTINGS, compiled_programs

from t5forge.serving.engine import Engine, ScorePair
from t5forge.serving.executables import on_device


def test_a_host_array_of_a_new_shape_reaches_the_device_without_compiling():
    rows = np.arange(7 * 13, dtype=np.int64).reshape(7, 13)  # a shape no other test takes
    with compiled_programs() as compiled:
        tokens = on_device(rows, np.int32)
        live = on_device(np.ones(13, bool))
    assert compiled == []
    assert tokens.dtype == np.int32 and live.dtype == np.bool_
    np.testing.assert_array_equal(np.asarray(tokens), rows)


def test_scoring_a_new_batch_shape_compiles_its_program_only(tiny_model):
    engine = Engine(tiny_model, dataclasses.replace(TEST_SETTINGS, compile_cache=""))
    pairs = [ScorePair([5, 9, 3, 1], [7, 8, 1])] * 33  # batch bucket 64: new to the process
    with compiled_programs() as compiled:
        scores = engine.score(pairs)
    assert compiled == ["jit(_score)"], compiled
    assert len(set(scores)) == 1
