"""The Python API: loading every checkpoint format, strings through the vocabulary, buckets, errors.

Parity of the numbers with transformers lives in tests/interop/test_huggingface.py; here the
models are t5forge's own tiny random ones and the vocabulary is seqio's 26-piece test model.
"""

import dataclasses

import jax
import numpy as np
import pytest

import t5forge
from t5forge.api import Model
from t5forge.data import SentencePieceVocabulary
from t5forge.errors import CheckpointError, ConfigError, DataError
from t5forge.interop.huggingface import save_hf_dir
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.models.transposed import untransposed

CONFIG = get_config("t5_1_1/tiny", vocab_size=32, dtype="float32")
TEXTS = ["this is a test", "a test"]


def _params(config, seed=0):
    return jax.device_get(build_model(config).init_params(jax.random.PRNGKey(seed)))


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory, test_spm_path):
    path = tmp_path_factory.mktemp("hf")
    save_hf_dir(_params(CONFIG), CONFIG, path, vocab_path=test_spm_path)
    return path


@pytest.fixture(scope="module")
def model(hf_dir):
    return t5forge.load(hf_dir)


def _same_vocabulary(a, b) -> bool:
    return (a.vocab_size, a.extra_ids, a.encode(TEXTS[0])) == (
        b.vocab_size,
        b.extra_ids,
        b.encode(TEXTS[0]),
    )


def test_hf_dir_loads_with_its_vocabulary(model, test_spm_path):
    assert model.config == CONFIG
    assert _same_vocabulary(model.vocabulary, SentencePieceVocabulary(test_spm_path))


def test_strings_go_through_the_vocabulary_with_eos(model):
    vocab = model.vocabulary
    inputs = [vocab.encode(t) + [1] for t in TEXTS]
    targets = [vocab.encode("is a") + [1]] * 2
    np.testing.assert_allclose(
        model.score(TEXTS, ["is a"] * 2), model.score(inputs, targets), rtol=1e-6
    )
    tokens = model.generate(inputs, max_length=6)
    assert model.generate(TEXTS, max_length=6) == [vocab.decode(row) for row in tokens.tolist()]


def test_padding_to_buckets_changes_no_result(model):
    rows = [[5, 9, 3, 12, 7, 1], [14, 3, 1]]
    together = model.generate(rows, max_length=5, method="beam", num_beams=3)
    alone = [model.generate([row], max_length=5, method="beam", num_beams=3)[0] for row in rows]
    np.testing.assert_array_equal(together, np.stack(alone))
    decoder_inputs = np.array([[0, 4, 6], [0, 8, 0]], np.int32)
    exact = build_model(CONFIG).logits(
        model.params,
        {
            "encoder_input_tokens": np.array([[5, 9, 3, 12, 7, 1], [14, 3, 1, 0, 0, 0]], np.int32),
            "decoder_input_tokens": decoder_inputs,
            "decoder_target_tokens": np.ones((2, 3), np.int32),
        },
    )
    np.testing.assert_allclose(
        model.logits([[5, 9, 3, 12, 7, 1], [14, 3, 1]], decoder_inputs), exact, atol=1e-5
    )


def test_zero_padded_token_arrays_score_as_their_rows(model):
    padded = model.score(np.array([[5, 9, 3, 1], [14, 1, 0, 0]]), np.array([[4, 1, 0], [6, 7, 1]]))
    rows = model.score([[5, 9, 3, 1], [14, 1]], [[4, 1], [6, 7, 1]])
    np.testing.assert_allclose(padded, rows, rtol=1e-6)


def test_lengths_in_one_bucket_share_a_compilation(model):
    predict = type(model._model)._predict
    model.generate([[5, 9, 3, 1], [2, 1]], max_length=4)
    compiled = predict._cache_size()
    model.generate([[5, 9, 3, 12, 7, 6, 1], [2, 1]], max_length=4)
    assert predict._cache_size() == compiled


def test_sampling_is_reproducible_by_seed(model):
    first = model.generate(TEXTS, max_length=8, method="sample", temperature=2.0, seed=3)
    assert model.generate(TEXTS, max_length=8, method="sample", temperature=2.0, seed=3) == first


def test_save_hf_round_trips_params_and_vocabulary(model, tmp_path):
    model.save_hf(tmp_path)
    again = t5forge.load(tmp_path)
    assert again.config == model.config
    assert _same_vocabulary(again.vocabulary, model.vocabulary)
    for a, b in zip(
        jax.tree_util.tree_leaves(model.params),
        jax.tree_util.tree_leaves(again.params),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_loads_t5x_checkpoint_with_preset_or_gin_file(shared_data, tmp_path):
    checkpoint = shared_data / "t5x_testdata" / "test_t5_tiny.checkpoint_0"
    with pytest.raises(ConfigError, match="does not record its model config; pass config="):
        t5forge.load(checkpoint)
    by_preset = t5forge.load(checkpoint, config="t5_1_1/tiny")
    gin_file = tmp_path / "tiny.gin"
    gin_file.write_text(
        "\n".join(
            f"T5Config.{f.name} = {getattr(by_preset.config, f.name)!r}"
            for f in dataclasses.fields(by_preset.config)
        )
    )
    by_gin = t5forge.load(checkpoint, config=gin_file)
    assert by_gin.config == by_preset.config
    logits = by_gin.logits([[5, 9, 1]], [[0, 4]])
    assert logits.shape == (1, 2, 32128) and np.isfinite(logits).all()


def test_loads_t5forge_checkpoint_with_its_recorded_config(tmp_path):
    from t5forge.checkpoints.checkpointer import Checkpointer

    params = _params(CONFIG, seed=1)
    checkpointer = Checkpointer(tmp_path, async_save=False)
    checkpointer.save(
        7, {"params": params}, metadata={"model_config": dataclasses.asdict(CONFIG)}, force=True
    )
    checkpointer.close()
    loaded = t5forge.load(tmp_path)
    assert loaded.config == CONFIG
    np.testing.assert_array_equal(
        np.asarray(loaded.params["token_embedder"]["embedding"]),
        params["token_embedder"]["embedding"],
    )


def test_decoder_only_rows_decode_independently_of_their_batch():
    config = get_config("decoder_only/tiny", vocab_size=32, dtype="float32")
    lm = Model(config, _params(config))
    prompts = [[5, 9, 3, 12], [14]]
    together = lm.generate(prompts, max_length=5)
    alone = np.stack([lm.generate([p], max_length=5)[0] for p in prompts])
    np.testing.assert_array_equal(together, alone)
    scores = lm.score(prompts, [[4, 1], [6, 7, 1]])
    assert scores.shape == (2,) and (scores < 0).all()


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda m: m.generate([], max_length=4), DataError, "inputs is empty"),
        (
            lambda m: m.generate([[3, 1]], max_length=0),
            ConfigError,
            "max_length must be an integer",
        ),
        (
            lambda m: m.generate([[3, 40]]),
            DataError,
            "token id 40 but the model's vocab_size is 32",
        ),
        (lambda m: m.generate([[3]], method="nucleus"), ConfigError, "unknown generation method"),
        (
            lambda m: m.generate([[3]], method="sample", top_k=5, top_p=0.9),
            ConfigError,
            "top_k or top_p, not both",
        ),
        (lambda m: m.score(["a"], ["b", "c"]), DataError, "1 inputs but 2 targets"),
        (
            lambda m: Model(m.config, m.params).generate(["a test"]),
            DataError,
            "no vocabulary .* pass token id arrays",
        ),
    ],
)
def test_bad_input_is_one_line(model, call, error, message):
    with pytest.raises(error, match=message) as raised:
        call(model)
    assert "\n" not in str(raised.value)


def test_unknown_paths_name_the_formats_tried(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        t5forge.load(tmp_path / "missing")
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match="tried Hugging Face .*t5forge .*T5X"):
        t5forge.load(tmp_path)


# ---------------------------------------------------------------------- misuse and length policies


@pytest.mark.parametrize("path", [12345, None, 1.5])
def test_load_of_a_non_path_is_one_line(path):
    with pytest.raises(CheckpointError, match="load takes a checkpoint path") as raised:
        t5forge.load(path)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "inputs, message",
    [
        ([123, None], r"inputs\[0\] is int 123; pass all strings or all lists"),
        (["a test", None], r"inputs\[1\] is NoneType None"),
        ([[3, 1], "a test"], r"inputs\[1\] is str"),
        ([[3, 1.5]], r"inputs\[0\] is list"),
        ("a test", "not str; wrap one string in a list"),
        (None, "not NoneType"),
    ],
)
def test_malformed_input_lists_are_one_line(model, inputs, message):
    with pytest.raises(DataError, match=message) as raised:
        model.generate(inputs, max_length=4)
    assert "\n" not in str(raised.value)


def test_save_hf_creates_missing_parents_and_names_what_it_cannot_write(model, tmp_path):
    assert (model.save_hf(tmp_path / "new" / "parent" / "hf") / "config.json").is_file()
    (tmp_path / "a_file").write_text("in the way")
    with pytest.raises(CheckpointError, match="cannot write the Hugging Face directory") as raised:
        model.save_hf(tmp_path / "a_file" / "hf")
    assert "\n" not in str(raised.value) and "a_file" in str(raised.value)
    with pytest.raises(ConfigError, match="save_hf takes a directory path"):
        model.save_hf(None)


def test_max_length_is_bounded(model):
    with pytest.raises(
        ConfigError, match="max_length 10000000 is over the model's max_output_length 1024"
    ):
        model.generate(TEXTS, max_length=10**7)
    with pytest.raises(ConfigError, match="max_output_length"):
        model.score(["a"], [[5] * 1025])


def test_long_inputs_are_refused_or_truncated_by_policy(hf_dir):
    model = t5forge.load(hf_dir)
    assert (model.max_input_length, model.input_length_policy) == (512, "refuse")
    model.max_input_length = 6
    long_row, head = [5, 9, 3, 12, 7, 6, 8, 1], [5, 9, 3, 12, 7, 1]
    with pytest.raises(
        DataError,
        match=r"inputs\[1\] has 8 tokens, more than the model's "
        r"max_input_length 6; .*input_length_policy='truncate'",
    ):
        model.generate([[3, 1], long_row], max_length=4)
    model.input_length_policy = "truncate"
    encoded = model.encode([[3, 1], long_row, [5, 9, 3, 12, 7, 6, 8, 4]])
    assert encoded.truncated == [False, True, True]
    assert encoded.rows == [[3, 1], head, [5, 9, 3, 12, 7, 6]]  # the head, EOS kept if it was
    np.testing.assert_array_equal(
        model.generate([long_row], max_length=4), model.generate([head], max_length=4)
    )
    np.testing.assert_allclose(model.score([long_row], [[4, 1]]), model.score([head], [[4, 1]]))
    model.input_length_policy = "cut"
    with pytest.raises(ConfigError, match="input_length_policy must be one of"):
        model.generate([long_row], max_length=4)


def test_max_input_length_comes_from_what_the_checkpoint_recorded(tmp_path, hf_dir):
    import json
    import shutil

    from t5forge.checkpoints.checkpointer import Checkpointer

    hf_copy = tmp_path / "hf"
    shutil.copytree(hf_dir, hf_copy)
    config_json = json.loads((hf_copy / "config.json").read_text())
    (hf_copy / "config.json").write_text(json.dumps({**config_json, "n_positions": 128}))
    assert t5forge.load(hf_copy).max_input_length == 128

    def saved_run(name, metadata):
        run = tmp_path / name
        checkpointer = Checkpointer(run, async_save=False)
        checkpointer.save(
            1,
            {"params": _params(CONFIG)},
            force=True,
            metadata={"model_config": dataclasses.asdict(CONFIG), **metadata},
        )
        checkpointer.close()
        return run

    recorded = saved_run("recorded", {"task_feature_lengths": {"inputs": 48, "targets": 16}})
    assert t5forge.load(recorded).max_input_length == 48
    from_gin = saved_run("from_gin", {})
    assert t5forge.load(from_gin).max_input_length == 512
    (from_gin / "config.gin").write_text(
        "MODEL_DIR = '/x'\nTASK_FEATURE_LENGTHS = {'inputs': 96, 'targets': 32}\n"
    )
    assert t5forge.load(from_gin).max_input_length == 96


def test_bfloat16_weights_are_the_kernels_only_and_compute_in_bfloat16(model, hf_dir):
    narrow = t5forge.load(hf_dir, weights_dtype="bfloat16")
    # On one CPU device the kernels are also stored transposed (models/transposed.py) beside
    # stacked copies of the fused projections'; as the checkpoint holds them:
    plain = untransposed(narrow.params)
    dtypes = {
        jax.tree_util.keystr(path): leaf.dtype
        for path, leaf in jax.tree_util.tree_leaves_with_path(plain)
    }
    kernels = {path: dtype for path, dtype in dtypes.items() if path.endswith("['kernel']")}
    assert kernels and set(kernels.values()) == {np.dtype(jax.numpy.bfloat16)}
    assert {dtypes[path] for path in dtypes if path not in kernels} == {np.dtype("float32")}
    # Against the same kernels rounded to bfloat16 but multiplied in float32, the narrow model
    # differs only by its activations' rounding at each matmul.
    rounded = Model(
        model.config,
        jax.tree.map(lambda leaf: leaf.astype("float32"), jax.device_get(plain)),
        model.vocabulary,
    )
    inputs, targets = np.array([[3, 4, 5, 1], [6, 7, 1, 0]]), np.array([[0, 3, 4], [0, 5, 6]])
    logits = np.asarray(narrow.logits(inputs, targets))
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, rounded.logits(inputs, targets), rtol=0, atol=0.05)
    assert len(narrow.generate(TEXTS, max_length=6)) == len(TEXTS)


def test_activation_dtype_is_chosen_at_load(model, hf_dir):
    half = t5forge.load(hf_dir, dtype=jax.numpy.bfloat16)
    assert (model.config.dtype, half.config.dtype) == ("float32", "bfloat16")
    inputs, targets = np.array([[3, 4, 5, 1], [6, 7, 1, 0]]), np.array([[0, 3, 4], [0, 5, 6]])
    exact = np.asarray(model.logits(inputs, targets))
    np.testing.assert_allclose(half.logits(inputs, targets), exact, rtol=0, atol=0.1)
    with pytest.raises(ConfigError, match="T5Config.dtype must be one of"):
        t5forge.load(hf_dir, dtype="float16")


@pytest.mark.parametrize("dtype", ["float16", "int4", "bfloat17"])
def test_unsupported_weights_dtype_is_one_line(hf_dir, dtype):
    with pytest.raises(ConfigError, match=f"weights_dtype='{dtype}' is not supported; use one of"):
        t5forge.load(hf_dir, weights_dtype=dtype)
