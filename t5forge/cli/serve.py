"""`t5forge serve --checkpoint PATH`: the HTTP inference server (see t5forge.serving).

Also `python -m t5forge serve`; it needs the `serve` extra (pip install 't5forge[serve]').

    t5forge serve --checkpoint runs/demo --port 8000
    curl -s localhost:8000/v1/predict -H 'Content-Type: application/json' \
      -d '{"inputs": ["translate English to German: Hello."]}'
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from t5forge import compile_cache
from t5forge.api import INPUT_LENGTH_POLICIES
from t5forge.cli.commands import COMMANDS
from t5forge.models.configs import DTYPES
from t5forge.models.weights_dtype import WEIGHTS_DTYPES
from t5forge.serving.settings import API_KEY_MIN_LENGTH, SCHEDULERS, ServerSettings

HELP = COMMANDS["serve"].summary

_DEFAULTS = ServerSettings()
# flag -> help; each flag is a ServerSettings field of the same name and type.
_SETTING_FLAGS = {
    "host": "address to bind; the default 127.0.0.1 reaches this machine only (0.0.0.0: all)",
    "port": "TCP port",
    "max_batch_size": "most rows (inputs, or input-choice pairs) in one device batch; 1 turns "
    "batching off",
    "max_wait_ms": "longest a row waits for others to fill its batch",
    "max_queue": "rows that may wait for the device; beyond that requests get 503 + Retry-After",
    "max_items": "most inputs (or input-choice pairs) in one request (more: 413)",
    "max_body_bytes": "largest request body (more: 413)",
    "max_new_tokens": "tokens generated per input when a request gives no max_new_tokens",
    "max_new_tokens_limit": "most tokens a request may ask for",
    "max_target_length": "longest /v1/score target or /v1/classify choice, in tokens",
    "max_num_beams": "most beams a request may ask for",
    "warmup_num_beams": "beam count compiled at start-up (0: none; other counts and "
    "max_new_tokens compile on their first request)",
    "input_length_policy": "inputs over the maximum input length: 'refuse' them (422) or "
    "'truncate' them (said in each response's 'truncated')",
    "max_input_length": "maximum input length in tokens (default: the inputs length the "
    "checkpoint was trained with, a HF config's n_positions, else 512)",
    "retry_after_s": "Retry-After seconds sent with 503",
    "scheduler": "'continuous' (default): greedy and sampled rows join the running batch at "
    "every decoding step and leave it when they end (encoder-decoders; decoder-only models "
    "and beam search use static batches); 'static': each batch runs until its longest row ends",
    "allow_new_beam_shapes": "compile beam search for any (num_beams, max_new_tokens) a request "
    "asks for (each new pair stalls every request for seconds while it compiles); without it "
    "only the warmed pair (--warmup_num_beams, --max_new_tokens) runs and others get 422",
    "tokens_per_tick": "tokens each continuous-batching slot makes per device call while no "
    "request waits (one per call whenever one does; 1: always one)",
    "decode_lanes": "continuous batching's slots split into this many lanes of max_batch_size "
    "// decode_lanes slots, each stepping on its own thread so that one lane's host work "
    "overlaps another's device step (on 2 cores it did not lower p99 latency: "
    "docs/serving.md#decode-lanes---decode_lanes-default-1)",
    "header_timeout_s": "close a connection that has not sent a complete request head this many "
    "seconds after it opened or after its last response (idle sockets cannot pile up)",
    "compile_cache": "directory where the server keeps its compiled programs (DIR/serving/, "
    "serialised executables), so that a restart with the same code, model and settings loads "
    f"every shape instead of compiling it ('': off; default: ${compile_cache.ENV}, else "
    "$JAX_COMPILATION_CACHE_DIR, else ~/.cache/t5forge/jax)",
}
_CHOICES = {"input_length_policy": INPUT_LENGTH_POLICIES, "scheduler": SCHEDULERS}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="t5forge serve",
        description=HELP,
        epilog="Endpoints: POST /v1/predict, /v1/score, /v1/classify; GET /healthz (200 once "
        "warm, with each compiled shape's state), /metrics (Prometheus), /docs (OpenAPI). SIGTERM finishes the requests "
        "in flight, then exits 0. Sampling without a seed draws one and returns it "
        "in the response ('seed'), so the request can be repeated exactly.",
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help="a t5forge run or checkpoint_<step> dir, a Hugging Face model dir, "
        "or a T5X checkpoint (with --config)",
    )
    parser.add_argument(
        "--config",
        help="model preset or gin file, for T5X checkpoints (which "
        "record none) or to override the stored config",
    )
    parser.add_argument(
        "--vocab", help="SentencePiece model to use instead of the one beside the checkpoint"
    )
    parser.add_argument("--extra_ids", type=int, default=100, help="sentinel ids of --vocab")
    parser.add_argument(
        "--weights_dtype",
        choices=WEIGHTS_DTYPES,
        help="store the Dense kernels in this dtype for inference: bfloat16 halves their "
        "bytes, int8 quarters them (per-channel scales, inputs quantised per token); "
        "default: as stored (docs/inference-dtypes.md)",
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        help="the activation dtype the network computes in (default: the checkpoint config's)",
    )
    parser.add_argument(
        "--api_key",
        default=os.environ.get("T5FORGE_API_KEY"),
        help=f"require 'Authorization: Bearer KEY' on /v1/* and /metrics; at least "
        f"{API_KEY_MIN_LENGTH} characters, e.g. from `python -c 'import secrets; "
        f"print(secrets.token_urlsafe())'` (default: $T5FORGE_API_KEY; unset: no key)",
    )
    parser.add_argument(
        "--log_level", default="info", choices=("critical", "error", "warning", "info", "debug")
    )
    fields = {f.name: f for f in dataclasses.fields(ServerSettings)}
    for name, text in _SETTING_FLAGS.items():
        default = getattr(_DEFAULTS, name)
        kind = str(fields[name].type).split(" ")[0]
        if kind == "bool":
            parser.add_argument(f"--{name}", action="store_true", help=text)
            continue
        parser.add_argument(
            f"--{name}",
            type={"int": int, "float": float}.get(kind, str),
            default=default,
            choices=_CHOICES.get(name),
            help=text if name == "compile_cache" else f"{text} (default: {default})",
        )
    return parser


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    from t5forge.serving import serve  # one error line if the `serve` extra is missing

    settings = ServerSettings(
        api_key=args.api_key, **{name: getattr(args, name) for name in _SETTING_FLAGS}
    )
    serve(
        args.checkpoint,
        vocab=args.vocab,
        extra_ids=args.extra_ids,
        config=args.config,
        weights_dtype=args.weights_dtype,
        dtype=args.dtype,
        settings=settings,
        log_level=args.log_level,
    )
    return 0
