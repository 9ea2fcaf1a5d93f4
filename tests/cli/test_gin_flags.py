"""The T5X flag surface: quoting, search paths, and one-line errors for typos."""

import gin
import pytest

from t5forge.errors import ConfigError
from t5forge.gin_config.gin_flags import gin_value, parse_gin, split_gin_flags


@gin.configurable
def _toy_train(model_dir=None, train_steps=1, batch_size=8):
    return model_dir, train_steps, batch_size


@pytest.fixture(autouse=True)
def _clean_gin():
    gin.clear_config()
    yield
    gin.clear_config()


def test_plain_and_t5x_quoted_strings_are_the_same_value():
    assert gin_value("/tmp/m") == "'/tmp/m'"
    assert gin_value("'/tmp/m'") == "'/tmp/m'"
    assert gin_value("3") == "3"
    assert gin_value("{'inputs': 512, 'targets': 114}") == "{'inputs': 512, 'targets': 114}"
    assert gin_value("@adafactor()") == "@adafactor()"
    assert gin_value("%MODEL_DIR") == "%MODEL_DIR"
    assert gin_value("True") == "True"


def test_split_and_parse_bindings_command_line_wins(tmp_path):
    gin_file = tmp_path / "run.gin"
    gin_file.write_text(
        "MODEL_DIR = '/from/file'\n_toy_train.model_dir = %MODEL_DIR\n_toy_train.train_steps = 5\n"
    )
    flags = split_gin_flags(
        [
            f"--gin_file={gin_file}",
            "--gin.MODEL_DIR=/tmp/m",
            "--gin._toy_train.train_steps",
            "7",
            "--seed=3",
        ]
    )
    assert flags.rest == ["--seed=3"]
    parse_gin(flags)
    assert _toy_train() == ("/tmp/m", 7, 8)
    assert gin.query_parameter("%MODEL_DIR") == "/tmp/m"


def test_gin_file_found_in_search_path(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.gin").write_text("_toy_train.batch_size = 2\n")
    parse_gin(split_gin_flags(["--gin_file=sub/x.gin", f"--gin_search_paths={tmp_path}"]))
    assert _toy_train()[2] == 2


def test_missing_gin_file_is_one_line():
    with pytest.raises(ConfigError, match="gin file 'nope.gin' not found") as e:
        parse_gin(split_gin_flags(["--gin_file=nope.gin"]))
    assert "\n" not in str(e.value)


def test_typo_in_parameter_suggests_close_name():
    with pytest.raises(ConfigError, match=r"did you mean _toy_train.train_steps\?") as e:
        parse_gin(split_gin_flags(["--gin._toy_train.train_stpes=3"]))
    assert "\n" not in str(e.value)


def test_typo_in_configurable_suggests_close_name():
    with pytest.raises(ConfigError, match="unknown gin configurable '_toy_trian'.*_toy_train"):
        parse_gin(split_gin_flags(["--gin._toy_trian.train_steps=3"]))


def test_unset_macro_names_the_flag_to_pass(tmp_path):
    gin_file = tmp_path / "run.gin"
    gin_file.write_text("_toy_train.train_steps = %TRAIN_STEPS\n")
    with pytest.raises(ConfigError, match=r"macro TRAIN_STEPS is not set; pass --gin.TRAIN_STEPS="):
        parse_gin(split_gin_flags([f"--gin_file={gin_file}"]))


def test_include_works_with_a_runs_folder_in_the_working_directory(tmp_path, monkeypatch):
    import t5forge.gin_config.gin_registry  # noqa: F401  (registers models.Model, which common.gin binds)

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "run.gin").write_text("include 'runs/common.gin'\n")
    parse_gin(split_gin_flags([f"--gin_file={tmp_path / 'run.gin'}"]), finalize=False)
    assert gin.query_parameter("%Z_LOSS") == 1e-4
