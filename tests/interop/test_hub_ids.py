"""Hugging Face hub ids: `t5forge.load("org/name")`, `convert --from hf --input org/name` and
`INITIAL_CHECKPOINT_PATH=hf://org/name` read the user's hub cache exactly as transformers does.

Each test lays a tiny random T5 saved by transformers into a hub cache on disk (tests/local_hub.py:
blobs, snapshots of relative symlinks, refs), points HF_HUB_CACHE at it for that test only (read
at call time) and refuses every outgoing connection, so a pass proves no network was used.
"""

import shutil

import numpy as np
import pytest
from commands import t5forge_in_process
from local_hub import block_network, cache_repo, commit_sha, hub_server

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import t5forge  # noqa: E402
from t5forge.errors import CheckpointError, ConfigError, StorageError  # noqa: E402
from t5forge.interop import hub  # noqa: E402

REPO = "tiny-org/tiny-t5"
DIMS = dict(
    vocab_size=32,
    d_model=16,
    d_kv=4,
    d_ff=32,
    num_layers=2,
    num_decoder_layers=2,
    num_heads=4,
    feed_forward_proj="gated-gelu",
    decoder_start_token_id=0,
)
ENCODER_INPUTS = np.array([[5, 9, 3, 12, 7, 1, 0], [14, 3, 1, 0, 0, 0, 0]], np.int32)
DECODER_INPUTS = np.array([[0, 6, 13, 2], [0, 10, 15, 12]], np.int32)


def _save_random_t5(path, seed: int) -> None:
    """A random-weight T5 (tied head, as transformers 5 builds it) saved by transformers."""
    torch.manual_seed(seed)
    transformers.T5ForConditionalGeneration(transformers.T5Config(**DIMS)).save_pretrained(path)


def _transformers_logits(path_or_id, **kwargs) -> np.ndarray:
    model = transformers.T5ForConditionalGeneration.from_pretrained(path_or_id, **kwargs).eval()
    with torch.no_grad():
        return (
            model(
                input_ids=torch.tensor(ENCODER_INPUTS, dtype=torch.long),
                attention_mask=torch.tensor(ENCODER_INPUTS > 0, dtype=torch.long),
                decoder_input_ids=torch.tensor(DECODER_INPUTS, dtype=torch.long),
            )
            .logits.float()
            .numpy()
        )


def _t5forge_logits(path_or_id) -> np.ndarray:
    return t5forge.load(path_or_id).logits(ENCODER_INPUTS, DECODER_INPUTS)


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    """Two random T5s saved by transformers: 'main' and the 'v2' revision."""
    root = tmp_path_factory.mktemp("saved")
    for seed, name in enumerate(("main", "v2")):
        _save_random_t5(root / name, seed)
    return root


@pytest.fixture
def hub_cache(tmp_path, saved_models, monkeypatch):
    """A hub cache holding REPO at two commits (main; v2 by tag), the only cache and no
    network for this test."""
    cache = tmp_path / "hf_home" / "hub"
    cache_repo(cache, REPO, saved_models / "main", commit_sha("main"))
    cache_repo(cache, REPO, saved_models / "v2", commit_sha("v2"), refs=("v2",))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    block_network(monkeypatch)
    return cache


@pytest.mark.parametrize("offline", ["1", None])
def test_an_id_in_the_cache_loads_as_transformers_loads_it(hub_cache, monkeypatch, offline):
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    expected = _transformers_logits(REPO, cache_dir=hub_cache, local_files_only=True)
    np.testing.assert_allclose(_t5forge_logits(REPO), expected, atol=1e-5)
    np.testing.assert_allclose(_t5forge_logits(f"hf://{REPO}"), expected, atol=1e-5)


def test_a_revision_names_a_tag_or_a_commit(hub_cache):
    main = _transformers_logits(REPO, cache_dir=hub_cache, local_files_only=True)
    v2 = _transformers_logits(REPO, cache_dir=hub_cache, local_files_only=True, revision="v2")
    assert not np.allclose(main, v2)
    for revision in ("v2", commit_sha("v2")):
        np.testing.assert_allclose(_t5forge_logits(f"{REPO}@{revision}"), v2, atol=1e-5)
    np.testing.assert_allclose(_t5forge_logits(f"{REPO}@main"), main, atol=1e-5)


def test_a_local_path_of_the_same_name_wins(hub_cache, saved_models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _save_random_t5(tmp_path / REPO, seed=7)
    local = _transformers_logits(tmp_path / REPO)
    np.testing.assert_allclose(_t5forge_logits(REPO), local, atol=1e-5)


def test_a_sharded_snapshot_is_cached_only_with_every_shard(saved_models, tmp_path, monkeypatch):
    model = transformers.T5ForConditionalGeneration.from_pretrained(saved_models / "main")
    model.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    shards = sorted((tmp_path / "sharded").glob("model-*-of-*.safetensors"))
    assert len(shards) > 1
    snapshot = cache_repo(tmp_path / "hub", REPO, tmp_path / "sharded", commit_sha("sharded"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    block_network(monkeypatch)
    expected = _transformers_logits(saved_models / "main")
    np.testing.assert_allclose(_t5forge_logits(REPO), expected, atol=1e-5)
    (snapshot / shards[-1].name).unlink()  # an interrupted download
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache"):
        t5forge.load(REPO)


def test_the_cache_is_the_one_the_environment_names_when_loading(
    hub_cache, saved_models, tmp_path, monkeypatch
):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "other_home"))
    with pytest.raises(CheckpointError, match="not in the Hugging Face cache .*other_home/hub"):
        t5forge.load(REPO)
    cache_repo(tmp_path / "other_home" / "hub", REPO, saved_models / "v2", commit_sha("other"))
    v2 = _transformers_logits(saved_models / "v2")
    np.testing.assert_allclose(_t5forge_logits(REPO), v2, atol=1e-5)


def test_convert_takes_an_id(hub_cache, tmp_path):
    expected = _transformers_logits(REPO, cache_dir=hub_cache, local_files_only=True)
    output = tmp_path / "converted"
    argv = ["convert", "--from", "hf", "--to", "t5forge", "--input", REPO, "--output", output]
    assert t5forge_in_process(*argv) == 0
    np.testing.assert_allclose(_t5forge_logits(output), expected, atol=1e-5)


def test_a_bare_id_is_a_path_where_gin_names_checkpoints(hub_cache):
    """A gin path is a path (a mistyped run dir is no hub lookup); hf:// spells the id there."""
    from t5forge.checkpoints import reader

    with pytest.raises(CheckpointError, match="does not exist.*hf://org/name"):
        reader.read(REPO)
    assert reader.read(f"hf://{REPO}").path.name == commit_sha("main")


@pytest.mark.parametrize(
    ("offline", "reason"),
    [("1", "HF_HUB_OFFLINE=1 forbids downloading it"), (None, "could not be reached")],
)
def test_an_id_not_cached_without_network_is_one_line(hub_cache, monkeypatch, offline, reason):
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", offline)
    with pytest.raises(CheckpointError) as raised:
        t5forge.load("tiny-org/missing@v3")
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("tiny-org/missing@v3 is no local path, and as a hub id it is not")
    assert f"not in the Hugging Face cache {hub_cache} and " in message and reason in message
    assert "`hf download tiny-org/missing --revision v3`" in message
    assert "models--tiny-org--missing" in message


@pytest.fixture
def local_hub_env(tmp_path, monkeypatch):
    """An empty hub cache, the network refused except 127.0.0.1 (where `hub_server` listens)."""
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; these tests need its requests.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    block_network(monkeypatch, allow_loopback=True)
    return cache


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_an_id_not_cached_is_downloaded_into_the_cache(
    local_hub_env, saved_models, tmp_path, monkeypatch, weights
):
    served = tmp_path / "served"
    shutil.copytree(saved_models / "main", served)
    if weights == "pytorch_model.bin":  # an older repository: PyTorch pickles only
        state = transformers.T5ForConditionalGeneration.from_pretrained(served).state_dict()
        torch.save(state, served / weights)
        (served / "model.safetensors").unlink()
    (served / "tf_model.h5").write_bytes(b"TF weights t5forge never fetches")
    with hub_server({"tiny-org/served": served}) as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        downloaded = _t5forge_logits("tiny-org/served")
    np.testing.assert_allclose(downloaded, _transformers_logits(saved_models / "main"), atol=1e-5)
    repo = local_hub_env / "models--tiny-org--served"
    assert (repo / "refs" / "main").read_text() == commit_sha("tiny-org/served")
    snapshot = repo / "snapshots" / commit_sha("tiny-org/served")
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(
        ["config.json", "generation_config.json", weights]
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the server is gone: the cache alone serves
    np.testing.assert_array_equal(_t5forge_logits("tiny-org/served"), downloaded)


def test_a_gated_repository_is_one_line(local_hub_env, saved_models, monkeypatch):
    with hub_server({"tiny-org/gated": saved_models / "main"}, gated={"tiny-org/gated"}) as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        with pytest.raises(StorageError) as gated:
            t5forge.load("tiny-org/gated")
        with pytest.raises(CheckpointError) as unknown:
            t5forge.load("hf://tiny-org/nowhere")
    assert str(gated.value) == (
        f"tiny-org/gated is a gated Hugging Face repository: accept its terms at "
        f"{url}/tiny-org/gated, log in with `hf auth login` (or set HF_TOKEN), and load it again"
    )
    assert str(unknown.value).startswith(f"tiny-org/nowhere is no model on {url}")


def test_malformed_ids(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "checkpoint_5").mkdir(parents=True)
    assert hub.parse("runs/checkpoint_5", bare_ids=True) is None  # exists: a path
    assert hub.parse("a/b/c", bare_ids=True) is None
    assert hub.parse("t5-small", bare_ids=True) is None  # one word: a path unless hf://
    assert hub.parse("hf://t5-small") == hub.HubId("t5-small")
    assert hub.parse("gs://bucket/run", bare_ids=True) is None
    assert hub.parse("org/name@refs/pr/1", bare_ids=True) == hub.HubId("org/name", "refs/pr/1")
    with pytest.raises(ConfigError, match="hf://org/name"):
        hub.parse("hf://org/na--me")


@pytest.mark.slow
def test_training_starts_from_an_id(tiny_runs, tmp_path):
    """`--gin.INITIAL_CHECKPOINT_PATH=hf://org/name` fine-tunes the cached model, offline."""
    from tiny_model import TINY_FIELDS

    torch.manual_seed(0)
    config = transformers.T5Config(
        vocab_size=TINY_FIELDS["vocab_size"],
        d_model=TINY_FIELDS["emb_dim"],
        d_kv=TINY_FIELDS["head_dim"],
        d_ff=TINY_FIELDS["mlp_dim"],
        num_layers=TINY_FIELDS["num_encoder_layers"],
        num_decoder_layers=TINY_FIELDS["num_decoder_layers"],
        num_heads=TINY_FIELDS["num_heads"],
        feed_forward_proj="gated-gelu",  # the T5 1.1 layout of tests/commands.py's LAYOUT_GIN
        tie_word_embeddings=False,
    )
    model = transformers.T5ForConditionalGeneration(config)
    # transformers 5 ties every T5 head at construction; a T5 1.1 checkpoint has its own.
    model.lm_head.weight = torch.nn.Parameter(torch.randn(config.vocab_size, config.d_model))
    model.all_tied_weights_keys.pop("lm_head.weight")
    model.save_pretrained(tmp_path / "saved")
    cache = tmp_path / "hub"
    cache_repo(cache, "tiny-org/tiny-run", tmp_path / "saved", commit_sha("tiny-run"))
    env = tiny_runs.env(HF_HUB_CACHE=cache, HF_HUB_OFFLINE=1)
    args = tiny_runs.train_args(
        tmp_path / "run", 1, "--gin.INITIAL_CHECKPOINT_PATH=hf://tiny-org/tiny-run"
    )
    result = tiny_runs.run(*args, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "loaded every parameter from hf://tiny-org/tiny-run" in result.stderr
