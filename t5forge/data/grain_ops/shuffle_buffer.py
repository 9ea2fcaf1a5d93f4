"""SeqIO's shuffle of a streaming split, resumable: file order per epoch, then a buffer.

A streaming split (TFRecord shards, tf.Example files, a file source) has no index to shuffle
by, so SeqIO shuffles it in two steps, and so does t5forge: the split's files are read in an
order the seed permutes afresh each epoch (`EpochShuffledFiles`), and the preprocessed
examples pass a buffer of `shuffle_buffer_size` (SeqIO's default 1000) from which a seeded
draw takes the next one (`ShuffleBufferDataset`). Both are deterministic for a seed.

The buffer's checkpoint state stays small (no examples in it): the parent's state before
the oldest example still buffered, how many examples were read since, and which of them sit
in which slot. Restoring re-reads that span - a few times the buffer size - and refills the
buffer exactly, so a resumed run continues with the examples an uninterrupted one gets.
"""

from __future__ import annotations

from typing import Any

import grain
import numpy as np

SHUFFLE_BUFFER_SIZE = 1000
_MASK = 2**64 - 1


def derived_seed(seed: int, *path: int) -> int:
    """A 32-bit seed for one use of the task seed (file order of an epoch, the buffer)."""
    return int(np.random.SeedSequence([seed, *path]).generate_state(1)[0])


class EpochShuffledFiles:
    """A source's split read with its files in a seeded order that changes every epoch.

    The source's own SeqIO `get_dataset(split, shuffle=True, seed)` permutes the files (as
    SeqIO's TfdsDataSource and FileDataSource do); `for_epoch(epoch)` gives that epoch's
    re-iterable.
    """

    def __init__(self, source: Any, split: str, seed: int):
        self._source, self._split, self._seed = source, split, seed

    def for_epoch(self, epoch: int):
        return self._source.get_dataset(
            split=self._split, shuffle=True, seed=derived_seed(self._seed, 1, epoch)
        )


def shuffles_files(source: Any) -> bool:
    """True for sources that list their files and read them in a seeded order (SeqIO's)."""
    return callable(getattr(source, "list_shards", None)) and callable(
        getattr(source, "get_dataset", None)
    )


def _draw(seed: int, index: int, count: int) -> int:
    """Slot `index`'s draw among `count`: splitmix64 of (seed, index), cheap and stateless."""
    x = (seed * 0x9E3779B97F4A7C15 + index + 1) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) % count


class ShuffleBufferIterator(grain.DatasetIterator):
    """Keeps `buffer_size` examples read ahead; each output is a seeded draw among them."""

    def __init__(self, parent: grain.DatasetIterator, buffer_size: int, seed: int):
        super().__init__(parent)
        self._buffer_size, self._seed = buffer_size, seed
        self._slots: list[tuple[int, Any]] = []  # (read number, example)
        self._states_before: dict[int, Any] = {}  # read number -> parent state before it
        self._read, self._oldest, self._emitted, self._exhausted = 0, 0, 0, False

    def _read_one(self) -> bool:
        state = self._parent.get_state()
        try:
            example = next(self._parent)
        except StopIteration:
            self._exhausted = True
            return False
        self._states_before[self._read] = state
        self._slots.append((self._read, example))
        self._read += 1
        return True

    def __next__(self):
        while len(self._slots) < self._buffer_size and not self._exhausted and self._read_one():
            pass
        if not self._slots:
            raise StopIteration
        slot = _draw(self._seed, self._emitted, len(self._slots))
        number, example = self._slots[slot]
        self._slots[slot] = self._slots[-1]
        self._slots.pop()
        del self._states_before[number]
        self._emitted += 1
        return example

    def get_state(self) -> dict[str, Any]:
        if not self._slots:
            parent, self._oldest = self._parent.get_state(), self._read
        else:
            while self._oldest not in self._states_before:
                self._oldest += 1
            parent = self._states_before[self._oldest]
        return {
            "parent": parent,
            "read_since_oldest": self._read - self._oldest,
            "slots": [number - self._oldest for number, _ in self._slots],
            "emitted": self._emitted,
            "exhausted": self._exhausted,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._parent.set_state(state["parent"])
        wanted = {offset: slot for slot, offset in enumerate(state["slots"])}
        slots: list[tuple[int, Any] | None] = [None] * len(wanted)
        states_before = {}
        for offset in range(state["read_since_oldest"]):
            before = self._parent.get_state()
            example = next(self._parent)
            if offset in wanted:
                slots[wanted[offset]] = (offset, example)
                states_before[offset] = before
        self._slots, self._states_before = slots, states_before
        self._read, self._oldest = state["read_since_oldest"], 0
        self._emitted, self._exhausted = state["emitted"], state["exhausted"]


class ShuffleBufferDataset(grain.IterDataset):
    """SeqIO's `ds.shuffle(shuffle_buffer_size, seed)` as a checkpointable grain dataset."""

    def __init__(self, parent: grain.IterDataset, buffer_size: int, seed: int):
        super().__init__(parent)
        self._buffer_size, self._seed = buffer_size, seed

    def __iter__(self) -> ShuffleBufferIterator:
        return ShuffleBufferIterator(self._parent.__iter__(), self._buffer_size, self._seed)
