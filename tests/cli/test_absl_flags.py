"""absl's and JAX's flags taken off a command line (t5forge.cli.absl_flags), in process:
--flagfile (nested, with comments), --undefok, JAX's flag forms, absl's boolean spellings."""

from __future__ import annotations

import jax
import pytest

from t5forge.cli import absl_flags
from t5forge.cli.t5x_main import split_run_mode
from t5forge.errors import ConfigError


def test_flagfiles_expand_in_place_and_the_rest_keeps_its_order(tmp_path):
    inner = tmp_path / "inner.txt"
    inner.write_text("--gin.BATCH_SIZE=4\n")
    outer = tmp_path / "outer.txt"
    outer.write_text(f"# the run's flags\n--gin.MODEL_DIR=/tmp/m\n--flagfile={inner}\n")
    argv = ["--gin_file", "a.gin", f"--flagfile={outer}", "--undefok=cell", "--cell=x", "--help"]
    assert absl_flags.take(argv) == [
        "--gin_file",
        "a.gin",
        "--gin.MODEL_DIR=/tmp/m",
        "--gin.BATCH_SIZE=4",
        "--help",  # left to the command's own parser, last
    ]


@pytest.fixture
def matmul_precision():
    before = jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_default_matmul_precision", before)


@pytest.mark.parametrize(
    "argv",
    [["--jax_default_matmul_precision=highest"], ["--jax_default_matmul_precision", "highest"]],
)
def test_jax_flags_set_jax_config(matmul_precision, argv):
    assert absl_flags.take([*argv, "--module_import=m"]) == ["--module_import=m"]
    assert jax.config.jax_default_matmul_precision == "highest"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--jax_default_matmul_precision=fastest"], "--jax_default_matmul_precision=fastest:"),
        (["--jax_enable_x64=maybe"], "--jax_enable_x64=maybe: a boolean flag takes true or false"),
        (["--jax_num_cpu_devices=two"], "--jax_num_cpu_devices=two: expected int"),
        (["--jax_platforms"], "--jax_platforms needs a value"),
    ],
)
def test_bad_jax_flags_are_one_line(argv, message):
    with pytest.raises(ConfigError, match=message) as raised:
        absl_flags.take(argv)
    assert len(str(raised.value).splitlines()) == 1


@pytest.mark.parametrize(
    "argv, kept",
    [
        (["--multiprocess_gpu"], ["--multiprocess_gpu"]),
        (["--multiprocess_gpu=true"], ["--multiprocess_gpu"]),
        (["--multiprocess_gpu=False"], []),
        (["--multiprocess_gpu", "--nomultiprocess_gpu"], []),  # the last one wins
        (["--nomultiprocess_gpu", "--multiprocess_gpu=1", "--x"], ["--x", "--multiprocess_gpu"]),
    ],
)
def test_absl_boolean_spellings(argv, kept):
    assert absl_flags.absl_booleans(argv, ("multiprocess_gpu",)) == kept


def test_run_mode_forms():
    assert split_run_mode(["--a", "--run_mode", "Train", "--b"]) == ("train", ["--a", "--b"])
    assert split_run_mode(["--run_mode=eval", "--run_mode=infer"]) == ("infer", [])
    assert split_run_mode(["--gin_file=x"]) == (None, ["--gin_file=x"])
