"""A lone streamed request, token by token: `t5forge serve` against CTranslate2's server.

serve_load's p99 at light loads is mostly how fast one request alone streams its tokens. This
isolates that: both servers (benchmarks/serve_load.py's: t5forge's continuous scheduler with
serve_load's flags, and benchmarks/serve_ct2.py on the same weights converted by CTranslate2)
run at once, and one greedy request at a time (a sentence of the bundled en-de validation
split, exactly --new_tokens tokens: serve.py's models never emit EOS) goes to each in turn over
a kept-alive connection, so that both see the same neighbours. Per side: median latency,
time to first token and milliseconds per token after the first (the decoding rate a long
request streams at), with the server process's CPU-seconds. The CPU model and load average
come first; results go to benchmarks/results/serve_alone.json.

    python benchmarks/serve_alone.py --models demo t5_1_1_small --repeats 20
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import decode  # same directory: CTranslate2's conversion of the same weights
import harness  # same directory
import httpx
import serve  # same directory
import serve_load  # same directory: the served flags and the peer's server

PEER = serve_load.PEER


def _request(client: httpx.Client, text: str, new_tokens: int) -> tuple[float, float, int]:
    """One streamed request: (seconds to its first token, seconds from first to last, tokens)."""
    body = {"inputs": [text], "max_new_tokens": new_tokens, "stream": True}
    sent, first, last, tokens = time.perf_counter(), None, None, 0
    with client.stream("POST", "/v1/predict", json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: {") and '"token"' in line:
                last = time.perf_counter()
                first, tokens = first or last, tokens + 1
    return first - sent, last - first, tokens


def _servers(name: str, model_dir: Path, vocab: Path, scratch: Path, args) -> dict[str, list]:
    """{side: server command} for t5forge and, when ctranslate2 is installed, the peer."""
    flags = serve_load._flags("continuous", scratch / f"compile_cache_{name}", args)
    serve_command = [sys.executable, "-m", "t5forge", "serve", "--checkpoint", str(model_dir)]
    commands = {"t5forge": [*serve_command, *flags]}
    vocab_size = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    ct2_dir = decode.ct2_model(model_dir, vocab_size, scratch / f"ct2_{name}")
    if ct2_dir is not None:
        commands[PEER] = [
            sys.executable, str(serve_load.PEER_SERVER), "--model", str(ct2_dir),
            "--spm", str(vocab), "--max_batch_size", str(args.max_batch_size),
            "--max_input_length", str(serve_load.MAX_INPUT_LENGTH),
        ]  # fmt: skip
    return commands


def _model(bench, name: str, model_dir: Path, vocab: Path, scratch: Path, sentences, args):
    commands = _servers(name, model_dir, vocab, scratch, args)
    with contextlib.ExitStack() as stack:
        servers = {side: stack.enter_context(serve.http_server(c)) for side, c in commands.items()}
        clients = {
            side: stack.enter_context(httpx.Client(base_url=url, timeout=args.timeout))
            for side, (url, _, _) in servers.items()
        }
        clocks = {side: harness.pid_cpu_seconds(pid) for side, (_, _, pid) in servers.items()}
        samples = {side: harness.Samples() for side in servers}
        parts = {side: [] for side in servers}
        for index in range(args.warmup + args.repeats):
            text = sentences[index % len(sentences)]
            for side, client in clients.items():
                cpu = clocks[side]()
                ttft, rest, tokens = _request(client, text, args.new_tokens)
                if index < args.warmup:
                    continue
                samples[side].seconds.append(ttft + rest)
                samples[side].cpu_seconds.append(clocks[side]() - cpu)
                parts[side].append((ttft, rest / max(tokens - 1, 1), tokens))
    for side in servers:
        ttft, per_token, tokens = (statistics.median(values) for values in zip(*parts[side]))
        bench.record(
            f"{name}, {side}",
            samples[side],
            args.new_tokens,
            "new tokens/s",
            p50_ttft_ms=ttft * 1000,
            ms_per_token=per_token * 1000,
        )
        print(f"    TTFT {ttft * 1000:.1f} ms, then {per_token * 1000:.3f} ms/token", flush=True)
        assert tokens == args.new_tokens, f"{side} streamed {tokens} tokens"
    row = f"serve_alone {name}, {args.new_tokens} new tokens"
    if PEER in servers:
        bench.compare(row, f"{name}, t5forge", f"{name}, {PEER}")
    else:
        bench.peer_missing(row, f"{name}, t5forge", PEER, decode.CT2_MISSING)


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--models", nargs="+", default=["demo"], choices=serve.MODELS)
    parser.add_argument("--new_tokens", type=int, default=serve_load.MAX_NEW_TOKENS)
    parser.add_argument("--repeats", type=harness.repeats, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--max_batch_size", type=int, default=32, help="decode slots")
    harness.add_arguments(parser, "serve_alone")
    args = parser.parse_args()
    bench = harness.Benchmark.from_args("serve_alone", args)
    sentences = serve.validation_sentences()
    with tempfile.TemporaryDirectory() as scratch:
        vocab = serve.vocabulary(Path(scratch))
        for name in args.models:
            print(f"{name}: {serve.MODELS[name]}", flush=True)
            model_dir = serve.write_model(name, Path(scratch), vocab)
            _model(bench, name, model_dir, vocab, Path(scratch), sentences, args)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
