"""grain datasets for the two sources grain has no adapter for, both checkpointable.

`IterableSplitDataset` reads a re-iterable (streaming) split in order, sharded by position
(a split with `for_epoch(epoch)` gives each epoch its own re-iterable: a shuffled file order);
its state is (epoch, position), and restore skips ahead. `MixtureDataset` samples its parents
with an RNG seeded by (seed, element index), so a restored iterator continues exactly.
"""

from __future__ import annotations

import grain
import numpy as np

from t5forge.errors import DataError


class IterableSplitIterator(grain.DatasetIterator):
    """Reads a re-iterable split; state is (epoch, position) and restore skips ahead."""

    def __init__(self, data, shard_index, num_shards, num_epochs, description):
        super().__init__()
        self._data, self._description = data, description
        self._shard_index, self._num_shards, self._num_epochs = shard_index, num_shards, num_epochs
        self._epoch, self._position, self._iterator = 0, 0, None

    def __next__(self):
        while self._num_epochs is None or self._epoch < self._num_epochs:
            if self._iterator is None:
                for_epoch = getattr(self._data, "for_epoch", None)
                self._iterator = iter(for_epoch(self._epoch) if for_epoch else self._data)
                for _ in range(self._position):
                    next(self._iterator)
            try:
                example = next(self._iterator)
            except StopIteration:
                if self._position == 0:
                    raise DataError(f"{self._description} is empty; check the data files") from None
                self._epoch, self._position, self._iterator = self._epoch + 1, 0, None
                continue
            self._position += 1
            if (self._position - 1) % self._num_shards == self._shard_index:
                return dict(example)
        raise StopIteration

    def get_state(self):
        return {"epoch": self._epoch, "position": self._position}

    def set_state(self, state):
        self._epoch, self._position, self._iterator = state["epoch"], state["position"], None


class IterableSplitDataset(grain.IterDataset):
    def __init__(self, data, shard_index, num_shards, num_epochs, description):
        super().__init__()
        self._args = (data, shard_index, num_shards, num_epochs, description)

    def __iter__(self):
        return IterableSplitIterator(*self._args)


class MixtureIterator(grain.DatasetIterator):
    """Picks the next task with an RNG seeded by (seed, element index): exact on resume."""

    def __init__(self, children, probabilities, seed):
        super().__init__(children)
        self._probabilities, self._seed, self._index = probabilities, seed, 0

    def __next__(self):
        rng = np.random.default_rng([self._seed, self._index])
        choice = int(rng.choice(len(self._probabilities), p=self._probabilities))
        example = next(self._parents[choice])
        self._index += 1
        return example

    def get_state(self):
        return {"index": self._index, "tasks": [p.get_state() for p in self._parents]}

    def set_state(self, state):
        self._index = state["index"]
        for parent, parent_state in zip(self._parents, state["tasks"]):
            parent.set_state(parent_state)


class MixtureDataset(grain.IterDataset):
    def __init__(self, parents, probabilities, seed):
        super().__init__(parents)
        self._probabilities, self._seed = probabilities, seed

    def __iter__(self):
        return MixtureIterator(
            [p.__iter__() for p in self.parents], self._probabilities, self._seed
        )
