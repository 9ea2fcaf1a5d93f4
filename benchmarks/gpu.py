"""GPU speed: T5 1.1 training steps in bfloat16 and decoding, t5forge vs transformers (PyTorch)
on the same GPU.

Training (T5 1.1 base and large, 512 input / 114 target tokens, dropout 0, AdamW both sides):
t5forge runs its bfloat16 compute policy (params float32; matmuls and activations bfloat16;
softmax and loss float32) through the real Trainer, attention 'auto' (cuDNN's fused kernel with
the relative-position bias). transformers runs T5ForConditionalGeneration with float32 weights
under torch.autocast(bfloat16) (what its Trainer does with bf16=True), attn_implementation
"sdpa" and torch's fused AdamW. The batch fills the GPU: t5forge's compiled step reports its
memory (XLA's memory analysis), the batch is scaled to use ~90% of the device and rounded to a
multiple of 8; transformers runs that batch, halved until it fits. Tokens/s count inputs +
targets of every row; MFU is t5forge.training.flops (model FLOPs / step time / bf16 peak).

Decoding (T5 1.1 large, bfloat16 weights both sides, 128 in / 64 new tokens, greedy and beam 4):
t5forge's `Model.generate` vs transformers' `generate`; the EOS column of the output
projection is zeroed on both sides so every row generates all new tokens (as
benchmarks/decode.py). Weights are random and differ between sides: the model is the same
architecture, and its correctness is the CPU parity suite's job, not this script's.

Each side runs alone on the GPU, in a process of its own (benchmarks/isolated.py), one after
the other. Timing is benchmarks/harness.py's (median of --runs after a warm-up that includes
compilation). `--budget_s` skips what would start after that many seconds, so a lease-bound
run still returns what it measured; results are rewritten after every phase.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import harness  # noqa: E402  (same directory)
import same_weights  # noqa: E402  (same directory)
from decode import forge_generate  # noqa: E402  (same directory)
from isolated import IsolatedSide  # noqa: E402  (same directory)

LEARNING_RATE = 1e-4
MEMORY_USE = 0.90  # of the device's memory that the chosen batch may take
MEMORY_FRACTION = "0.95"  # XLA_PYTHON_CLIENT_MEM_FRACTION for t5forge's worker


def _train_batch(vocab_size: int, batch: int, input_length: int, target_length: int) -> dict:
    rng = np.random.default_rng(0)
    targets = rng.integers(3, vocab_size, (batch, target_length), np.int32)
    return {
        "encoder_input_tokens": rng.integers(3, vocab_size, (batch, input_length), np.int32),
        "decoder_input_tokens": np.pad(targets[:, :-1], ((0, 0), (1, 0))),
        "decoder_target_tokens": targets,
        "decoder_loss_weights": np.ones_like(targets, np.float32),
    }


def _needed_bytes(compiled) -> int:
    memory = compiled.memory_analysis()
    return (
        memory.temp_size_in_bytes
        + memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
    )


# Factories of the sides, each called in its own worker (benchmarks/isolated.py).


def forge_train_side(
    config_name: str,
    first_batch: int,
    input_length: int,
    target_length: int,
    fill: bool = True,
    overrides: dict | None = None,
):
    """t5forge's train step at the largest batch (multiple of 8) that fits MEMORY_USE, or at
    `first_batch` without `fill`; `overrides` are T5Config fields (remat_policy,
    attention_implementation) for the MFU rows."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", MEMORY_FRACTION)
    import jax

    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config
    from t5forge.training import optimizers, partitioning
    from t5forge.training.trainer import Trainer, metrics_to_host

    device = jax.devices()[0]
    # A CPU reports no memory limit: the first batch stands.
    bytes_limit = (device.memory_stats() or {}).get("bytes_limit", float("inf"))
    limit = bytes_limit * MEMORY_USE
    config = get_config(config_name, dtype="bfloat16", dropout_rate=0.0, **(overrides or {}))
    trainer = Trainer(
        build_model(config),
        optimizers.adamw(LEARNING_RATE),
        partitioning.PjitPartitioner(devices=[device]),
    )
    start = time.perf_counter()
    # The params come from the very program the decode sides compile (the same config but
    # dropout, which init does not read), so JAX's persistent cache hands it from phase to
    # phase: on the H200 a build outlasted 274 s before its first step.
    params = build_model(get_config(config_name, dtype="bfloat16")).init_params(
        jax.random.PRNGKey(0)
    )
    state = trainer.state_from_params(params)
    jax.block_until_ready(state)
    init_seconds = time.perf_counter() - start
    print(f"  {config_name} train: t5forge: state ready in {init_seconds:.1f} s", flush=True)
    batch_size, tried = first_batch, []
    while True:
        start = time.perf_counter()
        batch = partitioning.shard_batch(
            _train_batch(config.vocab_size, batch_size, input_length, target_length), trainer.mesh
        )
        compiled = trainer.compile_train_step(state, batch)
        needed = _needed_bytes(compiled)
        tried.append((batch_size, needed, time.perf_counter() - start))
        print(
            f"  {config_name} train: t5forge: batch {batch_size} compiled in "
            f"{tried[-1][2]:.1f} s, needs {needed / 2**30:.1f} GiB",
            flush=True,
        )
        state_bytes = compiled.memory_analysis().argument_size_in_bytes
        per_row = max(needed - state_bytes, 1) / batch_size
        fitting = int(min((limit - state_bytes) / per_row, 1 << 20)) // 8 * 8
        if (
            not fill
            or limit == float("inf")
            or (needed <= limit and (fitting <= batch_size * 1.25 or len(tried) > 2))
        ):
            break
        if fitting < 8 or len(tried) > 3:
            raise RuntimeError(f"{config_name}: no batch fits ({tried})")
        batch_size = fitting
    holder = {"state": state}

    def advance():  # the state is donated: each step's output is the next one's input
        holder["state"], metrics = compiled(holder["state"], batch, None)
        return metrics

    def step(trace_dir: str | None = None):
        if trace_dir is not None:
            return _traced_steps(advance, Path(trace_dir))
        metrics = advance()
        return {
            "batch": batch_size,
            "loss": metrics_to_host(metrics)["loss"],  # waits for the step
            "device": device.device_kind,
            "init_s": round(init_seconds, 1),
            "compiles": [(b, round(n / 2**30, 1), round(s, 1)) for b, n, s in tried],
            "bytes_limit": bytes_limit,
        }

    return step


def _traced_steps(step, trace_dir: Path, steps: int = 3) -> dict:
    """Where a train step's time goes on the device: the top ops of a jax.profiler trace of
    `steps` steps (summed by op name over the trace's tracks) and each track's op time."""
    import jax
    from profile_decode import top_ops, track_totals

    jax.block_until_ready(step())
    with jax.profiler.trace(str(trace_dir), create_perfetto_trace=True):
        for _ in range(steps):
            jax.block_until_ready(step())
    trace = max(trace_dir.rglob("perfetto_trace.json.gz"), key=lambda p: p.stat().st_mtime)
    return {
        "traced_steps": steps,
        "top_ops": top_ops(trace, 40),
        "track_ms": track_totals(trace),
    }


def _hf_model(config_name: str, dtype: str):
    import torch
    import transformers

    from t5forge.interop.huggingface import config_to_hf
    from t5forge.models.presets import get_config

    transformers.utils.logging.set_verbosity_error()
    config = get_config(config_name, dtype="bfloat16")
    hf_config = transformers.T5Config(**config_to_hf(config))
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.T5ForConditionalGeneration._from_config(
            hf_config, attn_implementation="sdpa", torch_dtype=getattr(torch, dtype)
        )
    return model, config


def hf_train_side(config_name: str, batch: int, input_length: int, target_length: int):
    """transformers' bf16-autocast train step at `batch`, halved until it fits."""
    os.environ["JAX_PLATFORMS"] = "cpu"  # t5forge's config code must not take the GPU
    import torch

    model, config = _hf_model(config_name, "float32")
    model.train()
    device = model.device
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=LEARNING_RATE, weight_decay=0.0, fused=device.type == "cuda"
    )

    def run(rows):
        data = _train_batch(config.vocab_size, rows, input_length, target_length)
        inputs = torch.from_numpy(data["encoder_input_tokens"].astype(np.int64)).to(device)
        labels = torch.from_numpy(data["decoder_target_tokens"].astype(np.int64)).to(device)
        mask = torch.ones_like(inputs)

        def step():
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(input_ids=inputs, attention_mask=mask, labels=labels).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            return {
                "batch": rows,
                "loss": loss.item(),
                "attention": model.config._attn_implementation,
            }

        step()
        return step

    while True:
        try:
            return run(batch)
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
            if batch <= 1:
                raise
            batch //= 2


def forge_decode_side(config_name: str):
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", MEMORY_FRACTION)
    import jax
    import jax.numpy as jnp

    from t5forge.api import Model
    from t5forge.models.model import build_model
    from t5forge.models.presets import get_config

    config = get_config(config_name, dtype="bfloat16")
    params = same_weights.never_eos(build_model(config).init_params(jax.random.PRNGKey(0)))
    return forge_generate(Model(config, jax.tree.map(lambda p: p.astype(jnp.bfloat16), params)))


def hf_decode_side(config_name: str):
    os.environ["JAX_PLATFORMS"] = "cpu"
    import torch

    model, _ = _hf_model(config_name, "bfloat16")
    model.eval()
    with torch.no_grad():
        model.lm_head.weight[same_weights.EOS_ID] = 0.0

    def run(rows, new_tokens, beams):
        inputs = torch.from_numpy(rows.astype(np.int64)).to(model.device)
        with torch.no_grad():
            return (
                model.generate(
                    input_ids=inputs,
                    attention_mask=torch.ones_like(inputs),
                    max_new_tokens=new_tokens,
                    num_beams=beams,
                    do_sample=False,
                    **({"length_penalty": 0.0} if beams > 1 else {}),
                )
                .cpu()
                .numpy()[:, 1:]
            )

    return run


class Phases:
    """Runs sides one at a time until the time budget is spent; results rewritten after each."""

    def __init__(self, bench: harness.Benchmark, budget_s: float):
        self.bench, self.deadline = bench, time.monotonic() + budget_s

    def open(self, name: str, factory: str, **kwargs) -> IsolatedSide | None:
        """The side's worker, or None (said why) when the budget is spent or it failed."""
        if time.monotonic() > self.deadline:
            print(f"  {name}: skipped, time budget spent", flush=True)
            return None
        start = time.perf_counter()
        try:
            side = IsolatedSide(factory, **kwargs)
        except RuntimeError as error:
            print(f"  {name}: failed\n{error}", flush=True)
            return None
        print(f"  {name}: built in {time.perf_counter() - start:.1f} s", flush=True)
        return side

    def measure(self, side: IsolatedSide, name: str, runs: int, work_of, unit: str, **call):
        """The side's warm-up output after timing `runs` calls, or None when it failed."""
        try:
            start = time.perf_counter()
            first = side(**call)  # the warm-up: compiles where the factory did not
            print(f"  {name}: warm in {time.perf_counter() - start:.1f} s", flush=True)
            samples = harness.time_interleaved({name: side.bind(**call)}, runs, warmup=0)[name]
        except RuntimeError as error:
            print(f"  {name}: failed\n{error}", flush=True)
            return None
        info = first if isinstance(first, dict) else {}
        self.bench.record(name, samples, work_of(first), unit, **info)
        self.bench.finish()
        return first


def _train_side(phases: Phases, args, name: str, factory: str, trace_dir=None, **kwargs):
    """One training side built, timed (then traced, given `trace_dir`) and closed; its warm-up
    output, or None."""
    worker = phases.open(
        name, factory, input_length=args.input_length, target_length=args.target_length, **kwargs
    )
    if worker is None:
        return None
    tokens = args.input_length + args.target_length
    try:
        out = phases.measure(worker, name, args.runs, lambda out: out["batch"] * tokens, "tokens/s")
        if out is not None and trace_dir is not None:
            profile = worker(trace_dir=str(trace_dir))
            phases.bench.sides[name].update(profile)
            print(f"  {name}: top ops of {profile['traced_steps']} traced steps (ms, calls):")
            for track, op, ms, calls in profile["top_ops"][:15]:
                print(f"    {ms:9.1f} {calls:6d}  {op}  [{track}]", flush=True)
            phases.bench.finish()
        return out
    finally:
        worker.close()


def _train(phases: Phases, args, config_name: str, first_batch: int) -> None:
    from t5forge.models.presets import get_config
    from t5forge.training.flops import mfu, model_flops_per_step, peak_flops_per_device

    settings = ", ".join(f"{key}={value}" for key, value in args.train_overrides.items())
    ours = f"{config_name} train: t5forge" + (f" ({settings})" if settings else "")
    peer = f"{config_name} train: transformers"
    forge = _train_side(
        phases,
        args,
        ours,
        "gpu:forge_train_side",
        config_name=config_name,
        first_batch=first_batch,
        fill=args.fill,
        overrides=args.train_overrides,
        trace_dir=args.train_trace_dir,
    )
    if forge is None:
        return
    # transformers runs the batch t5forge filled the GPU with (halved until it fits).
    hf = None
    if args.peer:
        hf = _train_side(
            phases, args, peer, "gpu:hf_train_side", config_name=config_name, batch=forge["batch"]
        )
    phases.bench.machine["accelerator"] = forge["device"]
    config = get_config(config_name, dtype="bfloat16")
    peak = peak_flops_per_device(forge["device"], "bfloat16")
    for name, out in ((ours, forge), (peer, hf)):
        if out is None or peak is None:
            continue
        summary = phases.bench.sides[name]
        flops = model_flops_per_step(config, out["batch"], args.input_length, args.target_length)
        summary["mfu"] = mfu(flops, summary["median_s"], peak)
        print(f"  {name}: batch {out['batch']}, MFU {summary['mfu']:.1%}", flush=True)
    if hf is not None:
        batches = f"batch {forge['batch']}" + (
            f" (transformers {hf['batch']})" if hf["batch"] != forge["batch"] else ""
        )
        phases.bench.compare(
            f"{config_name} train step, bf16, {args.input_length}/{args.target_length}, "
            f"{batches}, {forge['device']}",
            ours,
            peer,
            peer_label="transformers bf16 + SDPA",
        )
    phases.bench.finish()


def _accelerator() -> str:
    """The GPU's name as nvidia-smi gives it (jax's device_kind says the same), or 'cpu'; read
    without jax, which would take the GPU's memory in this measuring process."""
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    return names[0].strip() or "cpu"


def _decode(phases: Phases, args, config_name: str) -> None:
    from t5forge.models.presets import get_config

    vocab_size = get_config(config_name, dtype="bfloat16").vocab_size
    rows = np.random.default_rng(0).integers(
        3, vocab_size, (args.decode_batch, args.decode_input_length), np.int32
    )
    settings = {1: "greedy", 4: "beam 4"}
    outputs = {}
    for side, factory in (
        ("t5forge", "gpu:forge_decode_side"),
        ("transformers", "gpu:hf_decode_side"),
    ):
        worker = phases.open(f"{config_name} decode: {side}", factory, config_name=config_name)
        if worker is None:
            continue
        try:
            for beams, setting in settings.items():
                outputs[side, beams] = phases.measure(
                    worker,
                    f"{config_name} {setting}: {side}",
                    args.runs,
                    lambda out: out.shape[0] * args.new_tokens,
                    "new tokens/s",
                    rows=rows,
                    new_tokens=args.new_tokens,
                    beams=beams,
                )
        finally:
            worker.close()
    for beams, setting in settings.items():
        tokens = [outputs.get((side, beams)) for side in ("t5forge", "transformers")]
        if any(out is None for out in tokens):
            continue
        if any(
            out.shape != (len(rows), args.new_tokens) or (out == same_weights.EOS_ID).any()
            for out in tokens
        ):
            print(f"  {setting}: rows did not all generate {args.new_tokens} tokens", flush=True)
            continue
        phases.bench.compare(
            f"{config_name} {setting} decode, bf16, batch {len(rows)}, "
            f"{args.decode_input_length} in / {args.new_tokens} new, "
            f"{phases.bench.machine.setdefault('accelerator', _accelerator())}",
            f"{config_name} {setting}: t5forge",
            f"{config_name} {setting}: transformers",
            peer_label="transformers bf16 + SDPA",
        )


def _overrides(text: str) -> dict:
    """argparse type of `field=value,...`: T5Config fields given as strings."""
    pairs = [item.partition("=") for item in text.split(",") if item]
    if any(not sep or not key for key, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected field=value,... got {text!r}")
    return {key: value for key, _, value in pairs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--train_configs",
        default="t5_1_1/large=80,t5_1_1/base=128",
        help="config=first batch tried, comma-separated",
    )
    parser.add_argument("--decode_config", default="t5_1_1/large")
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--target_length", type=int, default=114)
    parser.add_argument("--decode_batch", type=int, default=32)
    parser.add_argument("--decode_input_length", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--runs", type=harness.repeats, default=harness.MIN_REPEATS)
    parser.add_argument("--budget_s", type=float, default=1e9)
    parser.add_argument(
        "--no_fill",
        dest="fill",
        action="store_false",
        help="train at the given batches instead of the largest that fits",
    )
    parser.add_argument(
        "--no_peer",
        dest="peer",
        action="store_false",
        help="train t5forge alone (an MFU row: a setting transformers has no counterpart of)",
    )
    parser.add_argument(
        "--train_overrides",
        type=_overrides,
        default={},
        help="T5Config fields for t5forge's train side, e.g. remat_policy=minimal,"
        "attention_implementation=xla",
    )
    parser.add_argument(
        "--train_trace_dir",
        type=Path,
        default=None,
        help="after timing, trace t5forge's train step here and record its top ops",
    )
    parser.add_argument("--phases", default="train,decode", help="some of train,decode")
    harness.add_arguments(parser, "gpu")
    args = parser.parse_args()
    bench = harness.Benchmark.from_args("gpu", args)
    phases = Phases(bench, args.budget_s)
    # The first training config, then decoding, then the other configs: what matters most
    # comes first in a lease-bound run.
    wanted = set(args.phases.split(","))
    configs = args.train_configs.split(",") if "train" in wanted else []
    for index, item in enumerate(configs):
        name, _, first_batch = item.partition("=")
        _train(phases, args, name, int(first_batch))
        if index == 0 and "decode" in wanted:
            _decode(phases, args, args.decode_config)
    if not configs and "decode" in wanted:
        _decode(phases, args, args.decode_config)
    bench.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
