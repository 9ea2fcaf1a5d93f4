"""Checks the denoising tests share: undoing span corruption, resuming a pipeline anywhere."""

import numpy as np


def restored_tokens(example, first_sentinel: int, prompt_length: int = 0) -> list[int]:
    """The raw segment: each sentinel of the inputs replaced by the targets' span after it.

    Skips `prompt_length` leading input ids (a UL2 mode token) and the EOS of both; inputs
    without a sentinel (a prefix LM example) are followed by the targets.
    """
    inputs = example["inputs"][prompt_length:-1].tolist()
    targets = example["targets"][:-1].tolist()
    if not any(i >= first_sentinel for i in inputs):
        return inputs + targets
    fill, current = {}, None
    for i in targets:
        if i >= first_sentinel:
            current = fill[i] = []
        elif current is not None:
            current.append(i)
    return [t for i in inputs for t in (fill[i] if i >= first_sentinel else [i])]


def assert_resumes_exactly(task, lengths, seed: int, count: int, starts) -> None:
    """Restored at each of `starts`, the task's iterator gives the next 5 examples again."""
    iterator = iter(task.get_dataset("train", sequence_length=lengths, seed=seed))
    expected, states = [], []
    for _ in range(count):
        states.append(iterator.get_state())
        expected.append(next(iterator))
    for start in starts:
        resumed = iter(task.get_dataset("train", sequence_length=lengths, seed=seed))
        resumed.set_state(states[start])
        for want in expected[start : start + 5]:
            got = next(resumed)
            assert np.array_equal(want["inputs"], got["inputs"])
            assert np.array_equal(want["targets"], got["targets"])
