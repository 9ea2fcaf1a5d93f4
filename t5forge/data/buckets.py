"""The padding-bucket policy: the few sizes one-off batches are padded to.

A call of `Model.generate` / `score` or a server batch holds whatever rows it was given; each
new batch size or length would compile a new XLA program. So sizes are padded up to buckets:
`smallest`, then `growth` times the last, and so on, capped at `limit` when there is one. The
API and the server use this one policy with their own settings: the API compiles lazily, on
the first call of a shape, so it pads little (doubling); the server compiles every shape at
warm-up, before it reports ready, so it keeps the set small (x4, capped at the model's limit).
"""

from __future__ import annotations

import dataclasses

from t5forge.errors import DataError


@dataclasses.dataclass(frozen=True)
class Buckets:
    """Sizes smallest, smallest * growth, smallest * growth**2, ..., each capped at `limit`."""

    smallest: int = 1
    growth: int = 2
    limit: int | None = None

    def fit(self, size: int) -> int:
        """The smallest bucket that holds `size` (DataError past the limit)."""
        if self.limit is not None and size > self.limit:
            raise DataError(f"size {size} is over the largest bucket, {self.limit}")
        bucket = self.smallest
        while bucket < size:
            bucket *= self.growth
        return bucket if self.limit is None else min(bucket, self.limit)

    def sizes(self, largest: int | None = None) -> tuple[int, ...]:
        """Every bucket a size from 1 to `largest` (default: the limit) is padded to."""
        largest = self.limit if largest is None else largest
        sizes = [self.fit(1)]
        while sizes[-1] < largest:
            sizes.append(self.fit(min(sizes[-1] + 1, largest)))
        return tuple(sizes)
