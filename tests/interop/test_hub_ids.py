"""Hugging Face hub ids: `t5forge.load("org/name")`, `convert --from hf --input org/name` and
`INITIAL_CHECKPOINT_PATH=hf://org/name` read the user's hub cache exactly as transformers does.

Each test lays a tiny random T5 saved by transformers into a hub cache on disk (tests/local_hub.py:
blobs, snapshots of relative symlinks, refs), points HF_HUB_CACHE at it for that test only (read
at call time) and refuses every outgoing connection, so a pass proves no network was used.
"""

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


def test_a_gated_repository_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import; this test needs its requests.
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    block_network(monkeypatch, allow_loopback=True)
    with hub_server("tiny-org/gated") as endpoint:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
        with pytest.raises(StorageError) as gated:
            t5forge.load("tiny-org/gated")
        with pytest.raises(CheckpointError) as unknown:
            t5forge.load("hf://tiny-org/nowhere")
    assert str(gated.value) == (
        f"tiny-org/gated is a gated Hugging Face repository: accept its terms at "
        f"{endpoint}/tiny-org/gated, log in with `hf auth login` (or set HF_TOKEN), and load "
        f"it again"
    )
    assert str(unknown.value).startswith(f"tiny-org/nowhere is no model on {endpoint}")


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
