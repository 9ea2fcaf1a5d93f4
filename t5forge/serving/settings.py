"""What an operator sets when starting a server, with the safe defaults the issue asks for.

Loopback only, no request larger than a megabyte, at most 64 inputs per request, a bounded
queue: a server started without thought is still hard to take down or to reach by accident.
"""

from __future__ import annotations

import dataclasses

from t5forge import compile_cache
from t5forge.api import INPUT_LENGTH_POLICIES
from t5forge.errors import ConfigError

SCHEDULERS = ("continuous", "static")
API_KEY_MIN_LENGTH = 8


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """Every knob of `t5forge serve`; the command's flags carry the same names."""

    host: str = "127.0.0.1"
    port: int = 8000
    # Dynamic batching: rows of concurrent requests share one device batch of at most
    # max_batch_size rows, waiting at most max_wait_ms for company.
    max_batch_size: int = 32
    max_wait_ms: float = 5.0
    # Rows waiting for the device beyond this are refused with 503 + Retry-After.
    max_queue: int = 256
    # Request limits.
    max_items: int = 64
    max_body_bytes: int = 1_000_000
    max_new_tokens: int = 64  # when a request gives none
    max_new_tokens_limit: int = 128  # the most a request may ask for
    max_target_length: int = 128  # /v1/score targets and /v1/classify choices, in tokens
    max_num_beams: int = 8
    # Beam search with this many beams (at max_new_tokens) is compiled at start-up; 0: none.
    warmup_num_beams: int = 4
    # Inputs longer than the model's maximum input length: 'refuse' (422) or 'truncate'.
    input_length_policy: str = "refuse"
    max_input_length: int | None = None  # None: the model's own (what it was trained with)
    api_key: str | None = None
    retry_after_s: int = 1
    # 'continuous': greedy and sampled rows join and leave the running batch at every step
    # (encoder-decoders); 'static': each batch runs until its longest row ends.
    scheduler: str = "continuous"
    # Continuous batching makes this many tokens per device call while no request waits
    # (the host's per-call cost paid once for them), and one token per call whenever one does.
    tokens_per_tick: int = 8
    # Continuous batching's slots split into this many lanes (max_batch_size // lanes slots
    # each), each stepping on its own device thread so that one lane's host work overlaps
    # another's step (lanes.py).
    decode_lanes: int = 1
    # Beam search programs other than the warmed (warmup_num_beams, max_new_tokens) one are
    # compiled on request only when the operator allows it (each stalls traffic for seconds).
    allow_new_beam_shapes: bool = False
    # Connections that have not sent a request's headers this long after connecting (or after
    # their last response) are closed, so idle sockets cannot exhaust file descriptors.
    header_timeout_s: float = 10.0
    # Where compiled programs are kept (serving/executables.py): a restart with the same code,
    # model and settings loads every one instead of compiling it. '' turns it off.
    compile_cache: str = dataclasses.field(default_factory=compile_cache.default_directory)

    def __post_init__(self):
        positive = (
            "port",
            "max_batch_size",
            "max_queue",
            "max_items",
            "max_body_bytes",
            "max_new_tokens",
            "max_new_tokens_limit",
            "max_target_length",
            "max_num_beams",
            "retry_after_s",
            "tokens_per_tick",
            "decode_lanes",
        )
        for name in positive:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"server setting {name} must be an integer >= 1, got {value!r}")
        if not 0 <= self.warmup_num_beams <= self.max_num_beams:
            raise ConfigError(
                f"warmup_num_beams must be in [0, max_num_beams="
                f"{self.max_num_beams}], got {self.warmup_num_beams}"
            )
        if self.decode_lanes > self.max_batch_size:
            raise ConfigError(
                f"decode_lanes {self.decode_lanes} is over max_batch_size "
                f"{self.max_batch_size}: each lane holds max_batch_size // decode_lanes slots"
            )
        if not 0 <= self.max_wait_ms <= 10_000:
            raise ConfigError(f"max_wait_ms must be in [0, 10000], got {self.max_wait_ms!r}")
        if self.max_new_tokens > self.max_new_tokens_limit:
            raise ConfigError(
                f"max_new_tokens {self.max_new_tokens} is over "
                f"max_new_tokens_limit {self.max_new_tokens_limit}; raise the limit"
            )
        if self.input_length_policy not in INPUT_LENGTH_POLICIES:
            raise ConfigError(
                f"input_length_policy must be one of {INPUT_LENGTH_POLICIES}, got "
                f"{self.input_length_policy!r}"
            )
        if self.max_input_length is not None and self.max_input_length < 1:
            raise ConfigError(f"max_input_length must be >= 1, got {self.max_input_length}")
        if self.scheduler not in SCHEDULERS:
            raise ConfigError(f"scheduler must be one of {SCHEDULERS}, got {self.scheduler!r}")
        if not 0 < self.header_timeout_s <= 3600:
            raise ConfigError(
                f"header_timeout_s must be in (0, 3600], got {self.header_timeout_s!r}"
            )
        if self.max_queue < self.max_items:
            raise ConfigError(
                f"max_queue {self.max_queue} is below max_items {self.max_items}: a request "
                f"of {self.max_items} items could never be queued; raise --max_queue or lower "
                f"--max_items"
            )
        if self.api_key is not None and len(self.api_key) < API_KEY_MIN_LENGTH:
            raise ConfigError(
                f"api_key must be at least {API_KEY_MIN_LENGTH} characters; use a long random token "
                "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
            )
