"""T5X's `python -m t5x.main --run_mode=MODE ...` as `t5forge --run_mode=MODE ...` (or
`python -m t5forge --run_mode=MODE ...`): the same flags and gin files, and MODE picks the
command, as in T5X: train, eval, infer, or precompile (T5X's runs/precompile.gin).

    t5forge --run_mode=train --gin_file=t5x/examples/t5/t5_1_1/tiny.gin \\
        --gin_file=t5x/configs/runs/pretrain.gin --gin.MODEL_DIR=/tmp/run ... --alsologtostderr
"""

from __future__ import annotations

from t5forge.errors import ConfigError

HELP = "T5X's main.py: --run_mode=train|eval|infer|precompile, then that command's flags"

MODES = ("train", "eval", "infer", "precompile")


def split_run_mode(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--run_mode=MODE` or `--run_mode MODE` (absl's forms; the last one wins, any case) and
    the other arguments."""
    mode, rest, i = None, [], 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        if name != "--run_mode":
            rest.append(argv[i])
        elif eq:
            mode = value
        elif i + 1 < len(argv):
            mode, i = argv[i + 1], i + 1
        else:
            raise ConfigError("--run_mode needs a value: train, eval, infer or precompile")
        i += 1
    return (mode.lower() if mode is not None else None), rest


def main(argv: list[str]) -> int:
    mode, rest = split_run_mode(argv)
    if mode is None and any(arg in ("-h", "--help") for arg in rest):
        print(f"usage: t5forge --run_mode=MODE [flags]\n\n{__doc__}")
        return 0
    if mode == "export":
        raise ConfigError(
            "--run_mode=export (T5X's TensorFlow SavedModel export) is not built in t5forge; "
            "serve the checkpoint with `t5forge serve` or convert it with `t5forge convert --to hf`"
        )
    if mode not in MODES:
        got = "none was given" if mode is None else f"got {mode!r}"
        raise ConfigError(f"--run_mode must be one of {', '.join(MODES)} ({got})")
    if mode in ("train", "precompile"):
        from t5forge.cli import train

        return train.main(rest, precompile_only=mode == "precompile")
    from t5forge.cli import evaluate, infer

    return (evaluate if mode == "eval" else infer).main(rest)
