"""`FunctionSource`: a task's rows from a Python function of the split name."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

from t5forge.data.sources import Example, check_split, is_random_access


class _FunctionSplit:
    """A re-iterable calling `fn(split)` each time iteration starts."""

    def __init__(self, fn, split):
        self.fn, self.split = fn, split

    def __iter__(self):
        return iter(self.fn(self.split))


class FunctionSource:
    """Examples produced by `fn(split)`: a list/sequence (random access) or any iterable.

    The function must be deterministic and top level (picklable) so pipelines can resume.
    """

    def __init__(
        self,
        fn: Callable[[str], Iterable[Example]],
        splits: Sequence[str],
        num_examples: Mapping[str, int] | None = None,
    ):
        self.fn = fn
        self._split_names = tuple(splits)
        self._num_examples = dict(num_examples or {})

    @property
    def split_names(self) -> tuple[str, ...]:
        return self._split_names

    def split(self, split: str):
        check_split(
            f"FunctionSource({getattr(self.fn, '__name__', self.fn)})", split, self.split_names
        )
        probe = self.fn(split)
        if is_random_access(probe):
            return probe
        return _FunctionSplit(self.fn, split)

    def num_examples(self, split: str) -> int | None:
        if split in self._num_examples:
            return self._num_examples[split]
        data = self.split(split)
        return len(data) if is_random_access(data) else None

    def __repr__(self):
        return f"FunctionSource({getattr(self.fn, '__name__', self.fn)!r})"
