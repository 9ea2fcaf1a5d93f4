"""T5X's own gin files (../shared/t5x_gin, T5X at cc342d4) translated onto t5forge.

Each test parses real T5X files with a user's overrides and checks what the commands would
get: values moved onto t5forge's configurables, warnings and refusals as one line naming the
file and line. tests/t5x_files checks every file's outcome; this checks the translation.
"""

import copy
import importlib.util
import inspect
import os
import re
import sys
from pathlib import Path

import gin
import pytest

from t5forge.errors import ConfigError
from t5forge.gin_config.gin_flags import parse_gin, split_gin_flags
from t5forge.gin_config.t5x_compat import objects
from t5forge.gin_config.t5x_compat.names import NAMES

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("T5FORGE_SHARED_DATA", REPO.parent / "shared" / "data"))
CHECKOUT = SHARED_DATA.parent / "t5x_gin"
EXAMPLES = "t5x/examples/t5/t5_1_1/examples"
TASK = "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate"
# After an example file, T5X's tiny sizes win (tiny.gin includes base.gin again, so the
# example's DROPOUT_RATE is required again).
TINY = ("--gin_file=t5x/examples/t5/t5_1_1/tiny.gin", "--gin.DROPOUT_RATE=0.0")

pytestmark = pytest.mark.skipif(
    not CHECKOUT.is_dir(), reason=f"T5X's gin files not found at {CHECKOUT}"
)


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def _parse(*args):
    parse_gin(split_gin_flags([f"--gin_search_paths={CHECKOUT}", *args]))


def _value(binding):
    """What the run function receives for a binding: references and macros evaluated."""
    return copy.deepcopy(gin.query_parameter(binding))


def test_example_train_file_becomes_t5forge_train_arguments(capsys):
    _parse(
        f"--gin_file={EXAMPLES}/base_wmt_from_scratch.gin", *TINY, TASK, "--gin.MODEL_DIR=/tmp/m"
    )
    config = _value("train.model").config
    assert (config.emb_dim, config.mlp_activations, config.logits_via_embedding) == (
        8,
        ("gelu", "linear"),
        False,
    )
    assert _value("models.Model.z_loss") == 0.0001
    data = _value("train.train_dataset_cfg")
    assert (data.mixture_or_task_name, data.split, data.batch_size, data.pack, data.seed) == (
        "en_de_lohelp_translate",
        "train",
        128,
        True,
        0,
    )
    assert _value("train.infer_eval_dataset_cfg").split == "validation"
    checkpoints = _value("train.checkpoint_cfg")
    assert checkpoints.save.period == 5000 and checkpoints.restore.path is None
    assert _value("train.partitioner").num_partitions == 2
    assert _value("train.num_microbatches") == 1
    assert _value("train.relative_steps") is None
    assert float(_value("train.learning_rate_fn")(5)) == pytest.approx(0.01)
    assert hasattr(_value("train.optimizer")(0.01), "update")  # Adafactor, given the schedule
    assert gin.query_parameter("adafactor.Adafactor.decay_rate") == 0.8
    assert (_value("train.eval_period"), _value("train.random_seed")) == (500, 0)
    err = capsys.readouterr().err
    assert (
        f"{EXAMPLES}/base_wmt_from_scratch.gin:43: train_script.train.use_hardware_rng = "
        "True: accepted and ignored" in err
    )
    assert (
        f"{EXAMPLES}/base_wmt_from_scratch.gin:56: models.EncoderDecoderModel."
        "predict_batch_with_aux.num_decodes = 4: accepted and ignored" in err
    )
    assert "gs://t5-data/vocabs" not in err  # object storage is supported
    assert all(line.startswith("warning: ") for line in err.splitlines())


@pytest.mark.parametrize(
    "family, activations, tied",
    [
        ("t5_1_1", ("gelu", "linear"), False),
        ("t5_1_0", ("relu",), True),
        ("mt5", ("gelu", "linear"), False),
    ],
)
def test_model_files_of_each_family_with_the_eval_run_file(family, activations, tied):
    _parse(
        f"--gin_file=t5x/examples/t5/{family}/small.gin",  # T5X's t5_1_0/tiny.gin is T5.1.1
        "--gin_file=t5x/configs/runs/eval.gin",
        "--gin.DROPOUT_RATE=0.0",
        TASK,
        "--gin.CHECKPOINT_PATH=/tmp/ckpt",
        "--gin.EVAL_OUTPUT_DIR=/tmp/eval",
    )
    config = _value("evaluate.model").config
    assert (config.mlp_activations, config.logits_via_embedding) == (activations, tied)
    assert _value("evaluate.dataset_cfg").split == "test"
    assert _value("evaluate.restore_checkpoint_cfg").path == "/tmp/ckpt"
    assert _value("evaluate.output_dir") == "/tmp/eval"


def test_infer_run_file_and_its_float32_restore_warning(capsys):
    _parse(
        f"--gin_file={EXAMPLES}/base_wmt_infer.gin",
        TASK,
        "--gin.CHECKPOINT_PATH=/tmp/c",
        "--gin.INFER_OUTPUT_DIR=/tmp/out",
    )
    assert (_value("infer.mode"), _value("infer.checkpoint_period")) == ("predict", 100)
    data = _value("infer.dataset_cfg")
    assert (data.split, data.batch_size, data.task_feature_lengths) == (
        "test",
        32,
        {"inputs": 64, "targets": 64},
    )
    assert (
        "runs/infer.gin:71: utils.RestoreCheckpointConfig.dtype = 'bfloat16': accepted "
        "and ignored: t5forge keeps parameters in float32" in capsys.readouterr().err
    )


def test_remaining_import_forms_actions_and_microbatches(capsys):
    _parse(
        f"--gin_file={EXAMPLES}/test_train_t5_tiny.gin",
        TASK,
        "--gin.MODEL_DIR=/tmp/m",
        "--gin.trainer.Trainer.num_microbatches=0",
    )
    assert _value("train.num_microbatches") == 1  # T5X: 0 and None mean no microbatching
    (hook,) = _value("train.hooks")
    assert hook.key == "training_eval/en_de_lohelp_translate/loss"
    assert _value("models.Model.z_loss") == 0.0
    # T5's registry module, imported with t5forge's T5 standing in (T5's tasks get registered).
    assert _value("train.train_dataset_cfg").module == "t5.data.mixtures"
    assert _value("train.partitioner").num_partitions == 2
    assert "DatasetConfig.module" not in capsys.readouterr().err


def test_command_line_overrides_win_over_t5x_files():
    _parse(
        f"--gin_file={EXAMPLES}/base_wmt_from_scratch.gin",
        TASK,
        "--gin.MODEL_DIR=/tmp/m",
        "--gin.utils.SaveCheckpointConfig.period=7",
        "--gin.train.eval_period=2",
        "--gin.train/utils.DatasetConfig.batch_size=4",
        "--gin.network.T5Config.emb_dim=64",
        "--gin.trainer.Trainer.num_microbatches=4",
        "--gin.models.EncoderDecoderModel.z_loss=0.5",
    )
    assert _value("train.checkpoint_cfg").save.period == 7
    assert _value("train.eval_period") == 2
    assert _value("train.train_dataset_cfg").batch_size == 4
    assert _value("train.model").config.emb_dim == 64
    assert _value("train.num_microbatches") == 4
    assert _value("models.Model.z_loss") == 0.5


def test_refused_binding_is_one_line_with_file_line_and_reason(tmp_path):
    run = tmp_path / "run.gin"
    run.write_text(
        "from __gin__ import dynamic_registration\nfrom t5x import utils\n"
        f"include '{EXAMPLES}/base_wmt_from_scratch.gin'\n"
        "utils.SaveCheckpointConfig.dtype = 'bfloat16'\n"
    )
    with pytest.raises(ConfigError) as e:
        _parse(f"--gin_file={run}", TASK, "--gin.MODEL_DIR=/tmp/m")
    assert str(e.value) == (
        f"{run}:4: utils.SaveCheckpointConfig.dtype = 'bfloat16': not "
        "supported: t5forge keeps parameters in float32 and computes in "
        "T5Config.dtype"
    )


def test_object_storage_paths_reach_the_run_as_written():
    """T5X files keep their buckets: t5forge reads and writes URLs through t5forge.storage."""
    _parse(
        f"--gin_file={EXAMPLES}/base_wmt_finetune.gin",
        TASK,
        "--gin.MODEL_DIR=gs://b/run",
    )
    assert _value("train.model_dir") == "gs://b/run"
    restore = _value("train.checkpoint_cfg").restore
    assert restore.path == "gs://t5-data/pretrained_models/t5x/t5_1_1_base/checkpoint_1000000"


def test_t5x_module_names_exist_only_while_gin_parses():
    main = sys.modules["__main__"]
    _parse(f"--gin_file={EXAMPLES}/test_train_t5_tiny.gin", TASK, "--gin.MODEL_DIR=/tmp/m")
    assert sys.modules["__main__"] is main
    assert not [name for name in sys.modules if name.split(".")[0] in ("t5x", "seqio", "t5")]
    assert [importlib.util.find_spec(name) for name in ("t5x", "seqio", "t5")] == [None] * 3
    from t5forge import seqio

    assert seqio.__name__ == "t5forge.seqio"


def test_config_gin_uses_t5forge_names_and_parses_back(tmp_path):
    _parse(
        f"--gin_file={EXAMPLES}/base_wmt_from_scratch.gin", *TINY, TASK, "--gin.MODEL_DIR=/tmp/m"
    )
    written = gin.config_str()
    assert "import" not in written and "train.num_microbatches = 1" in written
    gin.clear_config()
    (tmp_path / "config.gin").write_text(written)
    parse_gin(split_gin_flags([f"--gin_file={tmp_path / 'config.gin'}"]))
    assert _value("train.train_dataset_cfg").batch_size == 128
    assert _value("train.model").config.emb_dim == 8


@pytest.mark.parametrize(
    "text, message",
    [
        (
            "from t5x import export_lib\nexport_lib.save.model = 1",
            r"bad.gin:2: T5X module t5x.export_lib is not available in t5forge: T5X's export "
            r"writes a TensorFlow SavedModel.*`t5forge serve`",
        ),
        (
            "import seqio\nseqio.FewshotDataSource.x = 1",
            r"bad.gin:3: seqio.FewshotDataSource is not supported by t5forge",
        ),
        (
            "from t5x import utils\nutils.DatasetConfig.batch_sise = 1",
            r"has no parameter 'batch_sise'.*did you mean .*batch_size",
        ),
        (
            "from flaxformer.components import dense\ndense.MlpBlok.intermediate_dim = 1",
            r"bad.gin:3: flaxformer.components.dense.MlpBlok is not supported by t5forge; "
            r"docs/flaxformer-gin.md lists the Flaxformer names",
        ),
        (
            "from flaxformer.architectures.h_transformer import h_attention\nh_attention.x = 1",
            r"bad.gin:2: Flaxformer module flaxformer.architectures.h_transformer is not "
            r"available in t5forge: H-Transformer-1D",
        ),
    ],
)
def test_unknown_t5x_names_are_one_line(tmp_path, text, message):
    bad = tmp_path / "bad.gin"
    bad.write_text("from __gin__ import dynamic_registration\n" + text + "\n")
    with pytest.raises(ConfigError, match=message) as e:
        _parse(f"--gin_file={bad}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("entry", [e for e in NAMES if e.build], ids=lambda e: e.t5x_path)
def test_every_parameter_of_a_t5x_name_has_a_rule(entry):
    params = inspect.signature(entry.build).parameters
    named = [p for p, v in params.items() if v.kind not in (v.VAR_KEYWORD, v.VAR_POSITIONAL)]
    assert set(named) <= set(entry.parameters())


def test_t5x_assignment_maps_name_t5forge_parameters():
    """sparse_upcycle.gin's map, on T5X's train-state paths, reads on t5forge's names: each
    expert from its layer's dense MLP, routers fresh, optimizer-state rules dropped."""
    t5x_map = (
        (r"target(.*)mlp\/expert(.*)", r"target\1mlp\2"),
        (r".*\/router\/.*", None),
        (r"state\/param_states.*", None),
    )
    converted = objects.params_assignment_map(t5x_map)
    assert len(converted) == 2

    def source(name):
        for pattern, replacement in converted:
            if re.fullmatch(pattern, name):
                return None if replacement is None else re.sub(pattern, replacement, name)
        return name

    assert source("encoder/layers_1/mlp/expert/wi_0/kernel") == "encoder/layers_1/mlp/wi_0/kernel"
    assert source("decoder/layers_1/mlp/router/router_weights/w/kernel") is None
    assert (
        source("encoder/layers_0/attention/query/kernel")
        == "encoder/layers_0/attention/query/kernel"
    )
