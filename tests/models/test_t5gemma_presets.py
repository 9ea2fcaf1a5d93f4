"""The T5Gemma presets: their gin files, the parameter counts published for each checkpoint,
the config transformers reads from them, and one training step from a gin file."""

import dataclasses
import json
import re
from pathlib import Path

import gin
import jax
import numpy as np
import pytest
from commands import REPO, t5forge_in_process
from tiny_model import TINY_FIELDS

import t5forge
from t5forge.interop import hf_t5gemma
from t5forge.interop.gin_model_config import config_from_gin
from t5forge.models.configs import T5Config
from t5forge.models.model import build_model
from t5forge.models.presets import get_config
from t5forge.models.t5gemma_presets import SIZES, T5GEMMA_PRESET_FIELDS

GIN_DIR = Path(t5forge.__file__).parent / "configs" / "models" / "t5gemma"
# The parameter count of each checkpoint: KerasHub's T5Gemma presets (keras-team/keras-hub@
# 71453d08f59edc90d276e999319fc51e61cbf82c, keras_hub/src/models/t5gemma/t5gemma_presets.py,
# "params"), the same as the safetensors totals Hugging Face's model API gives for google/t5gemma-*.
PUBLISHED = {
    "t5gemma/s_s": 312_517_632,
    "t5gemma/b_b": 591_490_560,
    "t5gemma/l_l": 1_241_761_792,
    "t5gemma/ml_ml": 2_200_345_344,
    "t5gemma/xl_xl": 3_766_980_608,
    "t5gemma/2b_2b": 5_596_853_760,
    "t5gemma/9b_2b": 12_292_375_296,
    "t5gemma/9b_9b": 20_333_401_088,
}
# google/t5gemma-ml-ml-prefixlm's config.json as published, kept as a test fixture by
# oracle/accelerated-data-science@eec364981941aadd89d2a785ee9df608f20740b8,
# tests/unitary/with_extras/aqua/test_data/recommend/config-json-files/t5gemma-ml-ml-prefixlm.json
# (the one T5Gemma config.json found whose source can be named; the other sizes' numbers come
# from the sources t5forge/models/t5gemma_presets.py names).
PUBLISHED_CONFIG_JSON = {
    "t5gemma/ml_ml": """{
  "architectures": [
    "T5GemmaForConditionalGeneration"
  ],
  "classifier_dropout_rate": 0.0,
  "decoder": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "classifier_dropout_rate": 0.0,
    "cross_attention_hidden_size": 1152,
    "dropout_rate": 0.0,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "is_decoder": true,
    "layer_types": [
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention"
    ],
    "max_position_embeddings": 8192,
    "model_type": "t5_gemma_module",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
    "use_cache": true,
    "vocab_size": 256000
  },
  "dropout_rate": 0.0,
  "encoder": {
    "attention_bias": false,
    "attention_dropout": 0.0,
    "attn_logit_softcapping": 50.0,
    "classifier_dropout_rate": 0.0,
    "dropout_rate": 0.0,
    "final_logit_softcapping": 30.0,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "hidden_size": 1152,
    "initializer_range": 0.02,
    "intermediate_size": 6912,
    "layer_types": [
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention",
      "sliding_attention",
      "full_attention"
    ],
    "max_position_embeddings": 8192,
    "model_type": "t5_gemma_module",
    "num_attention_heads": 4,
    "num_hidden_layers": 26,
    "num_key_value_heads": 4,
    "query_pre_attn_scalar": 256,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
    "use_cache": true,
    "vocab_size": 256000
  },
  "eos_token_id": [
    1,
    107
  ],
  "initializer_range": 0.02,
  "is_encoder_decoder": true,
  "model_type": "t5gemma",
  "pad_token_id": 0,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.53.0.dev0",
  "use_cache": true
}
""",
}
# Tracing the large presets' abstract parameters takes seconds each.
LARGE = {
    "t5gemma/l_l",
    "t5gemma/ml_ml",
    "t5gemma/xl_xl",
    "t5gemma/2b_2b",
    "t5gemma/9b_2b",
    "t5gemma/9b_9b",
}
NAMES = [
    pytest.param(name, marks=pytest.mark.slow) if name in LARGE else name
    for name in sorted(T5GEMMA_PRESET_FIELDS)
]


def _preset(name: str) -> T5Config:
    return get_config(name)


def test_every_published_size_with_a_source_has_a_preset_and_a_gin_file():
    assert set(T5GEMMA_PRESET_FIELDS) == set(PUBLISHED) == {f"t5gemma/{s}" for s in SIZES}
    assert {f"t5gemma/{p.stem}" for p in GIN_DIR.glob("*.gin")} == set(PUBLISHED)


@pytest.mark.parametrize("name", NAMES)
def test_preset_has_the_published_parameter_count(name):
    leaves = jax.tree_util.tree_leaves(build_model(_preset(name)).abstract_params())
    assert sum(int(np.prod(leaf.shape)) for leaf in leaves) == PUBLISHED[name]


@pytest.mark.parametrize("name", sorted(T5GEMMA_PRESET_FIELDS))
def test_gin_file_binds_exactly_the_preset(name):
    text = (GIN_DIR / f"{name.split('/')[1]}.gin").read_text()
    header = re.match(r"# (\S+): .*?([\d,]+) parameters\.", text)
    assert header and header.group(1) == name
    assert int(header.group(2).replace(",", "")) == PUBLISHED[name]
    gin.clear_config()
    try:
        gin.parse_config(text)
        assert config_from_gin() == _preset(name)
        gin.bind_parameter("%DROPOUT_RATE", 0.1)
        assert config_from_gin().dropout_rate == 0.1
    finally:
        gin.clear_config()


@pytest.mark.parametrize("name", sorted(T5GEMMA_PRESET_FIELDS))
def test_preset_is_a_config_transformers_reads_back(name):
    transformers = pytest.importorskip("transformers")
    preset = _preset(name)
    hf_config = hf_t5gemma.config_to_hf(preset)
    assert hf_t5gemma.config_from_hf(hf_config) == dataclasses.replace(preset, dtype="float32")
    read = transformers.T5GemmaConfig(**hf_config)
    for stack in ("encoder", "decoder"):
        module = getattr(read, stack)
        # transformers' own default layer pattern for a stack of that depth
        default = transformers.T5GemmaModuleConfig(num_hidden_layers=module.num_hidden_layers)
        assert tuple(module.layer_types) == preset.layer_types(stack) == tuple(default.layer_types)


@pytest.mark.parametrize("name", sorted(PUBLISHED_CONFIG_JSON))
def test_preset_is_what_the_import_makes_of_the_published_config_json(name):
    imported = hf_t5gemma.config_from_hf(json.loads(PUBLISHED_CONFIG_JSON[name]))
    assert imported == dataclasses.replace(_preset(name), dtype="float32")


@pytest.mark.slow  # 43 s at load 15
def test_smallest_gin_file_trains_a_step_from_scratch_shrunk_by_overrides(tmp_path, tiny_vocab):
    """`--gin_file=models/t5gemma/s_s.gin` parses and trains; later bindings shrink it."""
    tiny = {**TINY_FIELDS, "sliding_window": 3}
    layer_types = ("sliding_attention", "full_attention")
    overrides = [f"--gin.T5Config.{name}={value!r}" for name, value in tiny.items()]
    overrides += [
        f"--gin.T5Config.{stack}_layer_types={layer_types!r}" for stack in ("encoder", "decoder")
    ]
    model_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("T5FORGE_VOCAB", str(tiny_vocab))
        env.setenv("T5FORGE_DATA_DIR", str(REPO / "t5forge/tasks/data"))
        status = t5forge_in_process(
            "train",
            "--gin_file=models/t5gemma/s_s.gin",
            "--gin_file=runs/finetune.gin",
            *overrides,
            f"--gin.MODEL_DIR={model_dir}",
            "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate",
            "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 16}",
            "--gin.TRAIN_STEPS=1",
            "--gin.BATCH_SIZE=4",
            "--gin.CHECKPOINT_PERIOD=1",
            "--gin.EVAL_PERIOD=0",
            "--gin.INITIAL_CHECKPOINT_PATH=None",
        )
    assert status == 0
    assert (model_dir / "checkpoint_1").is_dir()
    written = (model_dir / "config.gin").read_text()
    assert "T5Config.rope_theta = 10000.0" in written
    assert "T5Config.emb_dim = 32" in written
