"""How many tokens a decoding call makes when every row has fewer than tokens_per_tick left.

A multi-token call (tokens_per_tick tokens per row) pays the host's per-call cost once; a
one-token call pays it per token but computes nothing past the rows' ends. When the longest
remaining budget r is below tokens_per_tick, the cheaper of one multi-token call and r
one-token calls is taken, from what calls of each kind have cost at that batch size: for the
demo model's lone row a one-token call took 1.45 ms and an 8-token call 4.97 ms in a served
run, so the last 2-7 tokens of every request fit in one call, where T5 1.1 small's 8-token call
costs about 8 one-token calls and its last tokens are made one at a time. Tokens are the same
either way: a row that ends inside a call has the rest dropped.
"""

from __future__ import annotations

# Weight of the newest call in the running mean of a call kind's seconds.
SMOOTHING = 0.2


class TickCosts:
    """Running means of a call's seconds per (tokens per call, rows), and the choice they
    give: until both kinds were timed at a batch size, tails go one token at a time."""

    def __init__(self, tokens_per_tick: int):
        self.tokens_per_tick = tokens_per_tick
        self._seconds: dict[tuple[int, int], float] = {}

    def record(self, ticks: int, rows: int, seconds: float) -> None:
        """A call of `ticks` tokens for `rows` rows took `seconds` (device work only)."""
        key = (ticks, rows)
        before = self._seconds.get(key)
        self._seconds[key] = seconds if before is None else before + SMOOTHING * (seconds - before)

    def choose(self, budget: int, one_rows: int, many_rows: int | None = None) -> int:
        """Tokens per row for the next call when its rows' longest remaining budget is
        `budget` tokens (no request waiting); a one-token call would step `one_rows` rows,
        a multi-token one `many_rows` (the same by default)."""
        many = self.tokens_per_tick
        if many == 1 or budget <= 1:
            return 1
        if budget >= many:
            return many
        many_rows = one_rows if many_rows is None else many_rows
        one, several = self._seconds.get((1, one_rows)), self._seconds.get((many, many_rows))
        if one is None or several is None:
            return 1
        return many if several < budget * one else 1
