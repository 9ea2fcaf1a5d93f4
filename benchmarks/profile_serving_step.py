"""Why a served continuous-batching step costs more than the same batch's step in generate().

For each model (the demo model, T5 1.1 small; random weights that never emit EOS) and each
number of occupied slots it compiles the server's step program (serving.slots.SlotDecoder)
with one suspect after another removed, prints what the optimized HLO copies per call
(concatenations: the stacking of fused projections' kernels; copies; dynamic updates: the slot
pool's write-back) and times every variant interleaved in one process (round robin, median of
--rounds), beside one step of generate()'s while loop at the same batch. On a shared machine
the figures are shares of one another, not absolutes: the load average is printed before and
after (docs/serving-profile.md).

Variants, each with the previous ones' removals:
  served     the step as it was: kernels stacked per call, scores for every row
  stacked    the kernels stacked once at load (layers.stack_projections)
  no-scores  no row asked for its log-likelihood (the log-softmax skipped)
  whole      a pool of exactly the occupied slots (no slicing out, no write-back)
  k-tick     no-scores with --ticks tokens per call (a scan in one program), per token
With --holes, instead: the step with holes below its last row against compacted slots.
With --static, also the static scheduler's StepDecoder, whole decodes per token: one token
per call with the trained layout ('static') against --ticks per call, stacked ('static k').

    PYTHONPATH=. .venv/bin/python benchmarks/profile_serving_step.py --models demo \
        --rows 2 8 32 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import same_weights  # noqa: E402  (same directory)
import serve  # noqa: E402  (benchmarks/serve.py: the served models' configs)

_MOVE = re.compile(r"^\s*\S+ = (\w+)\[([\d,]*)\]\S* (copy|concatenate|dynamic-update-slice)\(")
_BYTES = {"f32": 4, "bf16": 2, "s32": 4, "u32": 4, "pred": 1, "f16": 2}


def hlo_moves(text: str) -> dict[str, tuple[int, float]]:
    """{op: (count, megabytes written)} of an optimized HLO's copies, concatenations and
    dynamic updates (outside fusions or inside them: an upper bound of what one call moves)."""
    moves: dict[str, list] = {}
    for line in text.splitlines():
        match = _MOVE.match(line)
        if match:
            dtype, dims, op = match.groups()
            elements = int(np.prod([int(d) for d in dims.split(",") if d])) if dims else 1
            entry = moves.setdefault(op, [0, 0.0])
            entry[0] += 1
            entry[1] += elements * _BYTES.get(dtype, 4) / 1e6
    return {op: (n, round(mb, 2)) for op, (n, mb) in sorted(moves.items())}


def _model(name: str):
    import jax

    from t5forge.api import Model
    from t5forge.models.model import build_model

    config = serve._config(name)
    params = same_weights.never_eos(build_model(config).init_params(jax.random.PRNGKey(0)))
    return Model(config, params)


def _slot_step(model, params, inputs, args, slots: int, scored: bool, ticks: int):
    """(a call making `ticks` tokens for every occupied slot, its optimized HLO)."""
    import jax
    import jax.numpy as jnp

    from t5forge.serving.slots import SlotDecoder
    from t5forge.serving.stepwise import RowOptions

    rows = len(inputs)
    decoder = SlotDecoder(model.t5x_model, slots, args.cache_length, args.width)
    options = [RowOptions(10_000, scored=scored)] * rows
    pool = decoder.empty_pool(params)
    pool = decoder.admit(params, pool, {"encoder_input_tokens": inputs}, list(range(rows)), options)
    live = np.ones((rows,), bool)
    arguments = (params, pool["moving"], pool["fixed"], jnp.asarray(live))
    static = {"rows": rows, "width": args.width, "ticks": ticks}
    executable = decoder.programs.compile(
        "step", type(decoder)._step, decoder, *arguments, **static
    )
    state = {"pool": pool}

    def call():
        state["pool"], tokens, _ = decoder.step(params, state["pool"], live, ticks=ticks)
        return jax.block_until_ready(tokens)

    return call, executable.as_text()


def _hole_steps(model, params, inputs, args, slot_ids: list[int], ticks: int):
    """A call making `ticks` unscored tokens for rows in `slot_ids` of an --slots pool, the
    step covering the slots up to the bucket of the last one (as the server's engine does)."""
    import jax

    from t5forge.data.buckets import Buckets
    from t5forge.serving.slots import SlotDecoder
    from t5forge.serving.stepwise import RowOptions

    decoder = SlotDecoder(model.t5x_model, args.slots, args.cache_length, args.width)
    options = [RowOptions(10_000, scored=False)] * len(slot_ids)
    pool = decoder.empty_pool(params)
    pool = decoder.admit(params, pool, {"encoder_input_tokens": inputs}, slot_ids, options)
    live = np.zeros(Buckets(smallest=2).fit(max(slot_ids) + 1), bool)
    live[slot_ids] = True
    state = {"pool": pool}

    def call():
        state["pool"], tokens, _ = decoder.step(params, state["pool"], live, ticks=ticks)
        return jax.block_until_ready(tokens)

    def move_back_and_forth():
        """Two compactions of one row (the last slot to the first hole and back), timed as one."""
        for moves in ([(args.slots - 1, len(slot_ids) - 1)], [(len(slot_ids) - 1, args.slots - 1)]):
            state["pool"] = decoder.move(state["pool"], moves, 1)
        return jax.block_until_ready(state["pool"])

    return call, move_back_and_forth


def _holes(model, params, args) -> None:
    """Per-token step time with a hole pattern (the last row in the pool's last slot, the
    others at the front: the step covers every slot) against the same rows compacted (at the
    front: the step covers their bucket), one-token and --ticks calls, and one compaction's
    cost (a move of one row), median of --rounds."""
    for rows in args.rows:
        if rows >= args.slots:
            print(f"  rows {rows}: a full pool has no holes", flush=True)
            continue
        inputs = np.random.default_rng(0).integers(3, 1000, (rows, args.width), np.int32)
        holes = [*range(rows - 1), args.slots - 1]
        calls, move = {}, None
        for ticks in (1, args.ticks):
            suffix = "" if ticks == 1 else f" x{ticks}"
            calls[f"holes{suffix}"], move = _hole_steps(model, params, inputs, args, holes, ticks)
            calls[f"compacted{suffix}"], _ = _hole_steps(
                model, params, inputs, args, list(range(rows)), ticks
            )
        samples = {label: [] for label in [*calls, "one move"]}
        for call in [*calls.values(), move]:
            call()
        for _ in range(args.rounds):
            for label, call in calls.items():
                repeats = args.steps // (
                    1 if label.endswith(("holes", "compacted")) else args.ticks
                )
                start = time.perf_counter()
                for _ in range(repeats):
                    call()
                samples[label].append((time.perf_counter() - start) / args.steps * 1000)
            start = time.perf_counter()
            move()
            samples["one move"].append((time.perf_counter() - start) / 2 * 1000)
        medians = ", ".join(f"{k} {statistics.median(v):.2f}" for k, v in samples.items())
        print(f"  rows {rows} (last in slot {args.slots - 1}) ms per token: {medians}", flush=True)


def _static_decode(model, params, inputs, tokens_per_call: int, new_tokens: int):
    """A greedy StepDecoder.decode (the static scheduler's) of `new_tokens` (compiled now)."""
    from t5forge.serving.stepwise import RowOptions, StepDecoder

    decoder = StepDecoder(model.t5x_model, tokens_per_call=tokens_per_call)
    features, options = {"encoder_input_tokens": inputs}, [RowOptions(new_tokens)] * len(inputs)

    def call():
        return decoder.decode(params, features, new_tokens, options)

    call()
    return call


def _generate(model, inputs, length):
    """A greedy generate() of `length` tokens (compiled now)."""
    import jax

    rng, features = jax.random.PRNGKey(0), {"encoder_input_tokens": inputs}

    def call():
        return jax.block_until_ready(
            model.t5x_model.predict_batch_with_aux(
                model.params, features, rng, method="greedy", max_decode_length=length
            )[0]
        )

    call()
    return call


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["demo", "t5_1_1_small"])
    parser.add_argument("--rows", nargs="+", type=int, default=[2, 8, 32])
    parser.add_argument("--slots", type=int, default=32)
    parser.add_argument("--cache_length", type=int, default=128)
    parser.add_argument("--width", type=int, default=64, help="encoder length bucket")
    parser.add_argument("--ticks", type=int, default=8, help="tokens per multi-token call")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=16, help="tokens per timed sample")
    parser.add_argument(
        "--static",
        action="store_true",
        help="also the static scheduler's decoder: one token per call with the weights as "
        "trained ('static') against --ticks per call with stacked weights ('static k'); per "
        "token of a --steps decode, its encoding included",
    )
    parser.add_argument(
        "--holes",
        action="store_true",
        help="instead: steps of --rows rows with the last in the pool's last slot (a hole "
        "pattern: the step covers every slot) against the same rows compacted at the front, "
        "and one compaction's cost",
    )
    args = parser.parse_args()

    import jax

    from t5forge.models.layers import stack_projections

    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} CPUs", flush=True)
    for name in args.models:
        model = _model(name)
        stacked = stack_projections(model.params)
        if args.holes:
            print(f"{name}: steps with holes against compacted slots", flush=True)
            _holes(model, stacked, args)
            jax.clear_caches()
            continue
        for rows in args.rows:
            inputs = np.random.default_rng(0).integers(3, 1000, (rows, args.width), np.int32)
            built = {
                "served": _slot_step(model, model.params, inputs, args, args.slots, True, 1),
                "stacked": _slot_step(model, stacked, inputs, args, args.slots, True, 1),
                "no-scores": _slot_step(model, stacked, inputs, args, args.slots, False, 1),
                "whole": _slot_step(model, stacked, inputs, args, rows, False, 1),
                "k-tick": _slot_step(model, stacked, inputs, args, args.slots, False, args.ticks),
            }
            calls = {label: call for label, (call, _) in built.items()}
            if args.static:
                for label, weights, many in (
                    ("static", model.params, 1),
                    ("static k", stacked, args.ticks),
                ):
                    calls[label] = _static_decode(model, weights, inputs, many, args.steps)
            for label, (_, hlo) in built.items():
                print(f"  {name} rows {rows} {label}: HLO moves {hlo_moves(hlo)}", flush=True)
            lengths = (8, 8 + args.steps)
            generate = {length: _generate(model, inputs, length) for length in lengths}
            samples = {label: [] for label in [*calls, "generate"]}
            for call in calls.values():
                call()
            for _ in range(args.rounds):
                for label, call in calls.items():
                    repeats = 1 if label.startswith("static") else args.steps
                    repeats //= args.ticks if label == "k-tick" else 1
                    start = time.perf_counter()
                    for _ in range(repeats):
                        call()
                    samples[label].append((time.perf_counter() - start) / args.steps * 1000)
                timed = {}
                for length, call in generate.items():
                    start = time.perf_counter()
                    call()
                    timed[length] = time.perf_counter() - start
                samples["generate"].append(
                    (timed[lengths[1]] - timed[lengths[0]]) / args.steps * 1000
                )
            medians = {label: statistics.median(values) for label, values in samples.items()}
            line = ", ".join(f"{label} {ms:.2f}" for label, ms in medians.items())
            print(f"  {name} rows {rows} ms per token: {line}", flush=True)
            jax.clear_caches()
    print(f"load average after: {os.getloadavg()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
