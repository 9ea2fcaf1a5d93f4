"""T5X's `python -m t5x.main --run_mode=...` command lines, absl's and JAX's flags included,
run as `t5forge --run_mode=...` against T5X's own gin files (--gin_search_paths=../shared/t5x_gin).

T5X's main.py example (its module docstring) trains tiny.gin with runs/pretrain.gin; here the
user's overrides come from a --flagfile, as on a cluster, and the absl flags T5X users pass
(--alsologtostderr, --log_dir, --undefok, --nomultiprocess_gpu, --jax_log_compiles) each
show their effect.
"""

from __future__ import annotations

import re

import pytest
from t5x_gin_commands import PRETRAIN, T5_MODEL, T5X_GIN, argv, network_overrides, overrides

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not T5X_GIN.is_dir(), reason=f"T5X's gin files not found at {T5X_GIN}"),
]
ABSL_LINE = re.compile(r"^([IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ", re.MULTILINE)
EXAMPLES = "t5x/examples/t5/t5_1_1/examples"


def test_main_py_example_with_a_flagfile_and_absl_and_jax_flags(tiny_runs, tmp_path):
    flagfile = tmp_path / "flags.txt"
    overriding = overrides(tmp_path) + network_overrides(T5_MODEL)
    flagfile.write_text("# a T5X user's flags\n" + "\n".join(overriding) + "\n")
    logs = tmp_path / "logs"
    result = tiny_runs.run(
        f"--gin_search_paths={T5X_GIN}",
        f"--gin_file={T5_MODEL}",
        f"--gin_file={PRETRAIN}",
        f"--flagfile={flagfile}",
        "--gin.train.infer_eval_dataset_cfg=None",
        "--gin.train.eval_steps=1",
        "--run_mode=train",
        "--alsologtostderr",
        f"--log_dir={logs}",
        "--jax_log_compiles",
        "--nomultiprocess_gpu",
        "--undefok=borg_cell",
        "--borg_cell=xx",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert (tmp_path / "model" / "checkpoint_2").is_dir()  # MODEL_DIR came from the flagfile
    # absl's log lines at INFO on stderr (--alsologtostderr) and in its log file (--log_dir)
    assert "I" in ABSL_LINE.findall(result.stderr)
    logged = (logs / "t5forge.INFO").read_text()
    assert "I" in ABSL_LINE.findall(logged) and "W" in ABSL_LINE.findall(logged)
    assert re.search(r"\] Compiling jit\(", logged)  # --jax_log_compiles reached JAX


def test_run_mode_precompile_compiles_the_train_step_and_exits(tiny_runs, tmp_path):
    command, args = argv("t5x/configs/runs/precompile.gin", tmp_path)
    assert command == "train"
    result = tiny_runs.run("--run_mode=precompile", *args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "HloModule" in (tmp_path / "model" / "train_step.hlo.txt").read_text()
    assert not list((tmp_path / "model").glob("checkpoint_*"))


def test_dry_run_prints_the_configuration_and_runs_nothing(tiny_runs, tmp_path):
    _, args = argv(f"{EXAMPLES}/base_wmt_eval.gin", tmp_path)
    result = tiny_runs.run("--run_mode=EVAL", *args, "--dry_run")  # absl: any case
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RestoreCheckpointConfig.path = %CHECKPOINT_PATH" in result.stdout
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    "flags, message",
    [
        ([], "--run_mode must be one of train, eval, infer, precompile (none was given)"),
        (["--run_mode=serve"], "--run_mode must be one of train, eval, infer, precompile (got"),
        (["--run_mode=export"], "T5X's TensorFlow SavedModel export) is not built in t5forge"),
        (["--run_mode=precompile"], "--run_mode=precompile needs T5X's precompile configuration"),
        (["--run_mode=train", "--flagfile=/no/such/flags.txt"], "--flagfile: Unable to open"),
        (["--run_mode=train", "--v=loud"], "flag --verbosity=loud: invalid literal for int()"),
        (["--run_mode=train", "--jax_no_such_option"], "unknown JAX flag --jax_no_such_option"),
    ],
)
def test_bad_main_py_command_lines_are_one_line(tiny_runs, tmp_path, flags, message):
    _, args = argv(T5_MODEL, tmp_path)
    result = tiny_runs.run(*args, *flags)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert message in line, line
