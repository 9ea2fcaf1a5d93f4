"""A server counts every truncated input and logs them at most once a minute."""

import logging

from prometheus_client import CollectorRegistry, Counter

from t5forge.serving.truncation import TruncationNotices


def test_truncated_inputs_are_all_counted_and_logged_at_most_once_a_minute(caplog):
    counter = Counter("truncated", "test", registry=CollectorRegistry())
    now = [100.0]
    notices = TruncationNotices(counter, every_s=60.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="t5forge.serving.truncation")

    notices.record(0, 64)  # nothing cut: nothing said
    notices.record(1, 64)  # the first: said at once
    for seconds in (1, 30, 59):
        now[0] = 100.0 + seconds
        notices.record(2, 64)  # within the minute: counted, not logged
    now[0] = 161.0
    notices.record(1, 64)

    assert counter._value.get() == 8
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("truncated 1 input(s) to the model's max_input_length 64 (")
    assert messages[1].startswith(
        "truncated 7 input(s) to the model's max_input_length 64 in the last 61 s ("
    )
