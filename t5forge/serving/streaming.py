"""Server-sent events for generated tokens, with text deltas that never split a character.

SentencePiece pieces do not map one-to-one to text (a leading '▁' becomes a space only
between words; byte-fallback pieces form one character together), so each event carries the
difference between the decoding of all tokens so far and what was already sent, held back
while it ends in an incomplete character ('\\ufffd').
"""

from __future__ import annotations

import json


class TextDeltas:
    """Turns a row's growing token list into the new text each token adds.

    Only a short window is decoded per token, not the whole row (that cost grew with every
    token: 0.07 ms per token averaged over 128, per streamed row; docs/serving-profile.md):
    the tokens since the last sent one, plus the one before them, whose decoding is the
    context that decides the first new piece's leading space. Their difference is the delta.
    """

    def __init__(self, vocabulary):
        self.vocabulary = vocabulary
        self.tokens: list[int] = []
        self.context = 0  # the window starts here: one token before the unsent ones
        self.sent = 0  # tokens whose text has been sent

    def add(self, token: int) -> str:
        self.tokens.append(token)
        known = self.vocabulary.decode(self.tokens[self.context : self.sent])
        text = self.vocabulary.decode(self.tokens[self.context :])
        if text.endswith("\ufffd") or not text.startswith(known) or len(text) == len(known):
            return ""
        self.context, self.sent = self.sent, len(self.tokens)
        return text[len(known) :]


def sse_event(data: dict | str, event: str | None = None) -> bytes:
    """One server-sent event (`event:` line optional, JSON `data:` line, blank line)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()
