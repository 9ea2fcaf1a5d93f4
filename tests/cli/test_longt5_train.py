"""`t5forge train` runs a LongT5 encoder bound by gin (T5Config.encoder_attention and its
sizes) on the bundled data, and refuses packed inputs for transient-global attention in one
line; local attention trains packed."""

import pytest

LONGT5 = (
    "--gin.T5Config.local_radius=3",
    "--gin.T5Config.global_block_size=4",
)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "transient_global"])
def test_longt5_trains_from_gin_bindings(tiny_runs, tmp_path, kind):
    model_dir = tmp_path / kind
    pack = "True" if kind == "local" else "False"
    tiny_runs.train(
        model_dir,
        3,
        f"--gin.T5Config.encoder_attention={kind}",
        *LONGT5,
        f"--gin.PACK={pack}",
        period=3,
        check=True,
    )
    assert (model_dir / "checkpoint_3").is_dir()
    assert f"T5Config.encoder_attention = '{kind}'" in (model_dir / "config.gin").read_text()


@pytest.mark.slow
def test_packed_transient_global_is_refused_in_one_line(tiny_runs, tmp_path):
    result = tiny_runs.train(
        tmp_path / "packed",
        3,
        "--gin.T5Config.encoder_attention=transient_global",
        *LONGT5,
        "--gin.PACK=True",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (error,) = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert "cannot run on packed inputs" in error and "set pack=False" in error
