"""Server-sent events for generated tokens, with text deltas that never split a character.

SentencePiece pieces do not map one-to-one to text (a leading '▁' becomes a space only
between words; byte-fallback pieces form one character together), so each event carries the
difference between the decoding of all tokens so far and what was already sent, held back
while it ends in an incomplete character ('\\ufffd').
"""

from __future__ import annotations

import json


class TextDeltas:
    """Turns a row's growing token list into the new text each token adds."""

    def __init__(self, vocabulary):
        self.vocabulary = vocabulary
        self.tokens: list[int] = []
        self.sent = ""

    def add(self, token: int) -> str:
        self.tokens.append(token)
        text = self.vocabulary.decode(self.tokens)
        if text.endswith("\ufffd") or not text.startswith(self.sent):
            return ""
        delta, self.sent = text[len(self.sent) :], text
        return delta


def sse_event(data: dict | str, event: str | None = None) -> bytes:
    """One server-sent event (`event:` line optional, JSON `data:` line, blank line)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()
