"""What /metrics reports, in the Prometheus text format: traffic, batching, queue, latency, tokens.

Each server has its own registry (several servers can live in one process, as in tests).
Throughput in tokens/s is `rate(t5forge_generated_tokens_total[1m])` in Prometheus; the gauge
`t5forge_tokens_per_second` holds the rate of the last device batch for a quick look.
"""

from __future__ import annotations

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_TICK_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ServerMetrics:
    """The server's counters, gauges and histograms, all in one private registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "t5forge_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "t5forge_request_latency_seconds",
            "Time from request to response by endpoint",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "t5forge_batch_size",
            "Rows per device batch by kind",
            ["kind"],
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            "t5forge_queue_depth", "Rows waiting for the device", registry=self.registry
        )
        self.generated_tokens = Counter(
            "t5forge_generated_tokens", "Tokens generated", registry=self.registry
        )
        self.tokens_per_second = Gauge(
            "t5forge_tokens_per_second",
            "Generated tokens per second of the last device batch",
            registry=self.registry,
        )
        self.rejected = Counter(
            "t5forge_rejected",
            "Requests refused before reaching the device, by reason",
            ["reason"],
            registry=self.registry,
        )
        self.truncated_inputs = Counter(
            "t5forge_truncated_inputs",
            "Inputs cut to the model's max_input_length (input length policy 'truncate')",
            registry=self.registry,
        )
        self.disconnects = Counter(
            "t5forge_client_disconnects",
            "Requests whose client left before the answer",
            registry=self.registry,
        )
        self.tick_seconds = Histogram(
            "t5forge_tick_seconds",
            "Continuous batching's time per tick by phase: compact (moving rows into the "
            "holes ended rows left), admit (dispatching new rows' encoding, which runs on "
            "asynchronously: its device time lands in the step after it), step "
            "(a one-token device call), multi_step (a tokens_per_tick call), host (from one "
            "device call's end to the next one's start while rows run: streaming, bookkeeping)",
            ["phase"],
            buckets=_TICK_BUCKETS,
            registry=self.registry,
        )
        self.ready = Gauge(
            "t5forge_ready", "1 once warm-up compilation has finished", registry=self.registry
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
