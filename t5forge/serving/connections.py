"""The HTTP connection layer's own defences: a deadline for request heads.

uvicorn closes a keep-alive connection that stays silent for `timeout_keep_alive` after a
response, but a connection that never sends a byte, or sends its head one byte at a time, is
kept forever; a thousand of them exhaust the process's file descriptors and every normal
request fails. This protocol (uvicorn's h11 one) closes a connection whose request head is
not complete `header_timeout_s` after the connection opened or after its last response.
The server always runs on it, so the framing rules (h11's) do not depend on which optional
parser happens to be installed.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def head_deadline_protocol(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline of `header_timeout_s` for every request head."""

    class HeadDeadlineProtocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # a whole request head has arrived
                self._cancel_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_head_timer()

        def connection_lost(self, exc) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout_s, self._head_overdue)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_overdue(self) -> None:
            self._head_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeadDeadlineProtocol
