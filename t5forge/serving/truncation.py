"""What a server says about the inputs it truncated (input length policy 'truncate').

The library warns on every call that cuts an input, which suits a script. A server answering
thousands of requests would log a line per request: in one load test of long inputs, 1,236 of
the log's 1,344 lines. So the server counts every truncated input on /metrics
(`t5forge_truncated_inputs_total`), marks each one in its answer (`truncated`), and logs a
warning only when the first one arrives and then at most once a minute, with the count since
the last warning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)


class TruncationNotices:
    """Counts truncated inputs on `counter` (a prometheus Counter) and logs them, throttled."""

    def __init__(self, counter, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.counter, self.every_s, self.clock = counter, every_s, clock
        self.unreported = 0
        self.last_notice: float | None = None

    def record(self, truncated: int, limit: int) -> None:
        """`truncated` inputs of one request were cut to `limit` tokens."""
        if truncated <= 0:
            return
        self.counter.inc(truncated)
        self.unreported += truncated
        now = self.clock()
        if self.last_notice is not None and now - self.last_notice < self.every_s:
            return
        since = "" if self.last_notice is None else f" in the last {now - self.last_notice:.0f} s"
        logger.warning(
            "truncated %d input(s) to the model's max_input_length %d%s "
            "(t5forge_truncated_inputs_total counts them; at most one such line a minute)",
            self.unreported,
            limit,
            since,
        )
        self.unreported, self.last_notice = 0, now
