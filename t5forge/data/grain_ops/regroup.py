"""Grain datasets behind the preprocessors: batched maps and checkpointable regrouping.

Steps that turn n examples into m (span corruption merges 128 documents and cuts them into
fixed-length segments) need an iterator whose state resumes exactly mid-group, and fast
pipelines want whole groups read, tokenized and built at once, ahead of the consumer.
Both live here so `preprocessors` stays about the steps themselves.
"""

from __future__ import annotations

import concurrent.futures
import copy
import itertools
from collections.abc import Callable

import grain
import numpy as np

# Threads that run lazy per-example steps ahead of the consumer. Small on purpose: grain
# scans the whole buffer on every element, and the work is mostly GIL-bound Python.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=16)


class BatchMapDataset(grain.MapDataset):
    """Maps a list function (one output per input) over a MapDataset.

    Batched reads (`_getitems`, grain's own batched-read hook, which a regroup uses for a
    whole group) make one call, so e.g. a merge group's documents are tokenized at once.
    """

    def __init__(self, parent: grain.MapDataset, fn: Callable[[list], list], name: str):
        super().__init__(parent)
        self._fn, self._name = fn, name

    def __len__(self) -> int:
        return len(self._parent)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        return self._getitems([index])[0]

    def _getitems(self, indices):
        elements = self._parent._getitems(indices)
        present = [element for element in elements if element is not None]
        results = iter(self._fn(present) if present else ())
        return [None if element is None else next(results) for element in elements]

    def __str__(self) -> str:
        return f"BatchMapDataset({self._name})"


class _RegroupIterator(grain.DatasetIterator):
    """Reads `group_size` examples, emits `fn(group, rng)`; resumes exactly mid-group.

    The state is the parent's state at the start of the current group plus how many outputs
    of that group were already returned, so a restore re-reads and regenerates the group
    (with the same RNG) and skips what was emitted.
    """

    def __init__(self, parent, fn, group_size, seed):
        super().__init__(parent)
        self._fn, self._group_size, self._seed = fn, group_size, seed
        self._group_index = 0
        self._group_start = copy.deepcopy(parent.get_state())
        self._outputs: list | None = None
        self._emitted = 0

    def __next__(self):
        while True:
            if self._outputs is None:
                self._group_start = copy.deepcopy(self._parent.get_state())
                group = list(itertools.islice(self._parent, self._group_size))
                if not group:
                    raise StopIteration
                rng = np.random.default_rng([self._seed, self._group_index])
                self._outputs = list(self._fn(group, rng))
            if self._emitted < len(self._outputs):
                self._emitted += 1
                return self._outputs[self._emitted - 1]
            self._outputs, self._emitted = None, 0
            self._group_index += 1

    def get_state(self):
        if self._outputs is None:
            parent = copy.deepcopy(self._parent.get_state())
            return {"parent": parent, "group_index": self._group_index, "emitted": 0}
        return {
            "parent": copy.deepcopy(self._group_start),
            "group_index": self._group_index,
            "emitted": self._emitted,
        }

    def set_state(self, state):
        self._parent.set_state(state["parent"])
        self._group_index = state["group_index"]
        self._outputs = None
        self._emitted = 0
        if state["emitted"]:
            self._group_start = copy.deepcopy(state["parent"])
            group = list(itertools.islice(self._parent, self._group_size))
            rng = np.random.default_rng([self._seed, self._group_index])
            self._outputs = list(self._fn(group, rng))
            self._emitted = state["emitted"]


class _IndexedRegroupIterator(grain.DatasetIterator):
    """Regroups a random-access parent: group k is `fn` of parent[k*size:(k+1)*size].

    A group is a pure function of k (its RNG is seeded by k), so the next groups are built
    ahead on a small thread pool (tokenizing and numpy release the GIL, so this overlaps
    with the consumer), and the state is just (group index, outputs already returned).
    """

    def __init__(self, parent: grain.MapDataset, fn, group_size: int, seed: int):
        super().__init__()
        self._dataset, self._fn, self._group_size, self._seed = parent, fn, group_size, seed
        self._lookahead = max(2, READ_OPTIONS.prefetch_buffer_size // group_size)
        self._group_index, self._emitted = 0, 0
        self._outputs: list | None = None
        self._pending: dict[int, concurrent.futures.Future] = {}
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def _build(self, group_index: int) -> list | None:
        start = group_index * self._group_size
        stop = min(start + self._group_size, len(self._dataset))
        if start >= stop:
            return None
        # One batched read of the whole group (grain's own batching uses the same hook).
        elements = self._dataset._getitems(list(range(start, stop)))
        group = [element for element in elements if element is not None]
        if not group:
            return []
        return list(self._fn(group, np.random.default_rng([self._seed, group_index])))

    def _group(self, group_index: int) -> list | None:
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max(1, READ_OPTIONS.num_threads), thread_name_prefix="t5forge-regroup"
            )
        for ahead in range(group_index, group_index + self._lookahead + 1):
            if ahead not in self._pending:
                self._pending[ahead] = self._executor.submit(self._build, ahead)
        return self._pending.pop(group_index).result()

    def __next__(self):
        self._assert_not_closed()
        while True:
            if self._outputs is None:
                self._outputs = self._group(self._group_index)
                if self._outputs is None:
                    raise StopIteration
            if self._emitted < len(self._outputs):
                self._emitted += 1
                return self._outputs[self._emitted - 1]
            self._outputs, self._emitted = None, 0
            self._group_index += 1

    def _drop_pending(self) -> None:
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()

    def get_state(self):
        return {"group_index": self._group_index, "emitted": self._emitted}

    def set_state(self, state):
        self._drop_pending()
        self._group_index, self._emitted = state["group_index"], state["emitted"]
        self._outputs = None

    def close(self) -> None:
        if self._closed:
            return
        self._drop_pending()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        super().close()


class RegroupIterDataset(grain.IterDataset):
    """Turns each run of `group_size` examples into any number of examples, checkpointably.

    Over a random-access parent (the usual case) groups are index ranges read in one batch
    and built ahead in threads; over a streaming parent they are read in order.
    """

    def __init__(
        self, parent, fn: Callable[[list, np.random.Generator], list], group_size: int, seed: int
    ):
        super().__init__(parent)
        self._fn, self._group_size, self._seed = fn, group_size, seed

    def __iter__(self):
        if isinstance(self._parent, grain.MapDataset):
            return _IndexedRegroupIterator(self._parent, self._fn, self._group_size, self._seed)
        return _RegroupIterator(self._parent.__iter__(), self._fn, self._group_size, self._seed)

    def __str__(self):
        return f"RegroupIterDataset(group_size={self._group_size})"
