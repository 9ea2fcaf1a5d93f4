"""tf.data's deterministic `interleave`, over plain Python iterables.

TFDS reads a split's shards, and SeqIO's file sources read their files, through
`interleave(cycle_length=16, block_length=16)`: the examples of a multi-file split come in
that order, not file after file. Reproducing the order exactly is what makes the first
examples of a split (and so evaluation sets cut with `take`) the same as TensorFlow's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

Item = TypeVar("Item")
Element = TypeVar("Element")


def interleave(
    items: Iterable[Item],
    open_item: Callable[[Item], Iterable[Element]],
    cycle_length: int,
    block_length: int,
) -> Iterator[Element]:
    """Up to `cycle_length` opened items in turn, `block_length` elements from each.

    As tf.data does it: an exhausted item frees its slot and the cycle moves on; the slot is
    filled with the next unopened item when the cycle comes back to it.
    """
    pending = iter(items)
    slots: list[Iterator[Element] | None] = [None] * cycle_length
    open_count, slot, taken, inputs_left = 0, 0, 0, True
    while inputs_left or open_count:
        current = slots[slot]
        if current is not None:
            element = next(current, _END)
            if element is not _END:
                taken += 1
                if taken == block_length:
                    slot, taken = (slot + 1) % cycle_length, 0
                yield element
                continue
            slots[slot], open_count = None, open_count - 1
            slot, taken = (slot + 1) % cycle_length, 0
        elif inputs_left:
            item = next(pending, _END)
            if item is _END:
                inputs_left = False
            else:
                slots[slot], open_count = iter(open_item(item)), open_count + 1
        else:
            slot, taken = (slot + 1) % cycle_length, 0


_END = object()
