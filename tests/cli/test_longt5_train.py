"""`t5forge train` runs a LongT5 encoder bound by gin (T5Config.encoder_attention and its
sizes) on the bundled data, packed as T5X pretraining packs: windows and global tokens stay
inside each packed example."""

import pytest


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["local", "transient_global"])
def test_longt5_trains_packed_from_gin_bindings(tiny_runs, tmp_path, kind):
    model_dir = tmp_path / kind
    tiny_runs.train(
        model_dir,
        3,
        f"--gin.T5Config.encoder_attention={kind}",
        "--gin.T5Config.local_radius=3",
        "--gin.T5Config.global_block_size=4",
        "--gin.PACK=True",
        period=3,
        check=True,
    )
    assert (model_dir / "checkpoint_3").is_dir()
    assert f"T5Config.encoder_attention = '{kind}'" in (model_dir / "config.gin").read_text()
