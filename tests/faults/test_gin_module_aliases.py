"""T5X's module aliases: its run files say `import __main__ as train_script` (eval_script,
infer_script) and users copy `train_script.train.eval_period = ...` out of them; a user's file
may declare its own (`from t5x import utils as tu`). As in gin, once a file declares the alias a
binding may spell the name through it or as the name alone, wherever gin takes a binding: a
`--gin.` flag, `--gin_bindings`, a later file without dynamic registration, a file with the
import of its own; the run gets the same value either way. What gin refuses (`__main__.train`
after that import, an alias no file declares, a dynamic file using another file's alias) stays
refused, in one line saying what to write. Each case is `t5forge <command> ... --dry_run` in
process: the whole configuration step of the command, then the value the run would get."""

from __future__ import annotations

import copy

import gin
import pytest
from commands import t5forge_in_process

EXAMPLES = "t5x/examples/t5/t5_1_1/examples"
TASK = "--gin.MIXTURE_OR_TASK_NAME=en_de_lohelp_translate"
USER_ALIAS = "from t5x import utils as tu"
CHECKPOINT = ["--gin.CHECKPOINT_PATH=/c"]


class Alias:
    """One alias as a T5X user meets it: the command, the gin file that declares it (with the
    flags it needs), the binding spelled through the alias and as the name alone, and where
    the run reads it."""

    def __init__(self, command, run, import_line, through_alias, name_alone, value, read):
        self.command, self.run, self.import_line = command, run, import_line
        self.spellings = {"alias": through_alias, "name alone": name_alone}
        self.value, self.read = value, read


ALIASES = {
    "train_script": Alias(
        "train",
        [f"--gin_file={EXAMPLES}/base_wmt_from_scratch.gin", TASK, "--gin.MODEL_DIR=/tmp/m"],
        "import __main__ as train_script",
        "train_script.train.eval_period",
        "train.eval_period",
        4,
        lambda: gin.query_parameter("train.eval_period"),
    ),
    "eval_script": Alias(
        "eval",
        [f"--gin_file={EXAMPLES}/base_wmt_eval.gin", TASK, *CHECKPOINT, "--gin.EVAL_OUTPUT_DIR=/e"],
        "import __main__ as eval_script",
        "eval_script.evaluate.output_dir",
        "evaluate.output_dir",
        "'/tmp/evaluated'",
        lambda: repr(gin.query_parameter("evaluate.output_dir")),
    ),
    "infer_script": Alias(
        "infer",
        [
            f"--gin_file={EXAMPLES}/base_wmt_infer.gin",
            TASK,
            *CHECKPOINT,
            "--gin.INFER_OUTPUT_DIR=/i",
        ],
        "import __main__ as infer_script",
        "infer_script.infer.checkpoint_period",
        "infer.checkpoint_period",
        7,
        lambda: gin.query_parameter("infer.checkpoint_period"),
    ),
    "a user's alias": Alias(
        "train",
        ["--gin_file=user.gin", TASK, "--gin.MODEL_DIR=/tmp/m"],
        USER_ALIAS,
        "tu.SaveCheckpointConfig.period",
        "utils.SaveCheckpointConfig.period",
        7,
        lambda: copy.deepcopy(gin.query_parameter("train.checkpoint_cfg")).save.period,
    ),
}
DYNAMIC = "from __gin__ import dynamic_registration\n"
# The user's file that declares `tu` and includes T5X's example.
USER_GIN = f"{DYNAMIC}{USER_ALIAS}\ninclude '{EXAMPLES}/base_wmt_from_scratch.gin'\n"


def _given(way: str, binding: str, alias: Alias, tmp_path) -> list[str]:
    """The command-line arguments that give `binding` (a gin statement) in one way."""
    if way == "--gin. flag":
        return [f"--gin.{binding.replace(' = ', '=', 1)}"]
    if way == "--gin_bindings":
        return [f"--gin_bindings={binding}"]
    text = f"{binding}\n"
    if way == "file with its own import":
        text = f"{DYNAMIC}{alias.import_line}\n{text}"
    (tmp_path / "override.gin").write_text(text)
    return [f"--gin_file={tmp_path / 'override.gin'}"]


def _configure(command: str, run: list[str], tmp_path, t5x_gin, *extra) -> int:
    """`t5forge COMMAND --dry_run` in process (parse, translation, binding checks); the status."""
    (tmp_path / "user.gin").write_text(USER_GIN)
    search = f"--gin_search_paths={t5x_gin},{tmp_path}"
    return t5forge_in_process(command, search, *run, *extra, "--dry_run")


@pytest.fixture
def t5x_gin(shared_data):
    path = shared_data.parent / "t5x_gin"
    if not path.is_dir():
        pytest.skip(f"T5X's gin files not found at {path}")
    return path


WAYS = ["--gin. flag", "--gin_bindings", "file without imports", "file with its own import"]
ACCEPTED = [
    (alias, spelling, way)
    for alias in ALIASES
    for spelling in ("alias", "name alone")
    for way in WAYS
    if not (spelling == "name alone" and way == "file with its own import")  # gin: NameError
]


@pytest.mark.parametrize("alias, spelling, way", ACCEPTED)
def test_both_spellings_reach_the_run(alias, spelling, way, t5x_gin, tmp_path, capsys):
    case = ALIASES[alias]
    binding = f"{case.spellings[spelling]} = {case.value}"
    given = _given(way, binding, case, tmp_path)
    status = _configure(case.command, case.run, tmp_path, t5x_gin, *given)
    err = capsys.readouterr().err
    assert status == 0 and "error:" not in err, err
    assert case.read() == case.value


REFUSED = {  # (alias, extra arguments, the one error line; {tmp} is the case's folder)
    "__main__.train after `import __main__ as train_script`": (
        "train_script",
        ["--gin.__main__.train.eval_period=4"],
        "unknown gin configurable '__main__.train' in `__main__.train.eval_period = 4`; the gin "
        "files' imports bind no name `__main__`: write train_script.train or train",
    ),
    "__main__.train in --gin_bindings": (
        "train_script",
        ["--gin_bindings=__main__.train.eval_period = 4"],
        "unknown gin configurable '__main__.train' in `__main__.train.eval_period = 4`; the gin "
        "files' imports bind no name `__main__`: write train_script.train or train",
    ),
    "an alias no file declares": (
        "train_script",
        ["--gin.script.train.eval_period=4"],
        "unknown gin configurable 'script.train' in `script.train.eval_period = 4`; the gin "
        "files' imports bind no name `script`: write train",
    ),
    "another command's alias": (
        "train_script",
        ["--gin.infer_script.infer.checkpoint_period=7"],
        "unknown gin configurable 'infer_script.infer' in `infer_script.infer.checkpoint_period "
        "= 7`; the gin files' imports bind no name `infer_script`: write infer",
    ),
    "a misspelt name through the alias": (
        "train_script",
        ["--gin.train_script.trian.eval_period=4"],
        "unknown gin configurable 'train_script.trian' in `train_script.trian.eval_period = 4`; "
        "did you mean train_script.train?",
    ),
    "a misspelt parameter through the alias": (
        "train_script",
        ["--gin.train_script.train.eval_perod=4"],
        "train_script.train has no parameter 'eval_perod' (in `train_script.train.eval_perod = "
        "4`); did you mean train_script.train.eval_period?",
    ),
    "a wrong value through the alias names its flag": (
        "train_script",
        ["--gin.train_script.train.eval_period='often'"],
        "--gin.train_script.train.eval_period='often': train.eval_period must be an int >= 0, "
        "not 'often'",
    ),
    "a user's alias misspelt": (
        "a user's alias",
        ["--gin.ut.SaveCheckpointConfig.period=7"],
        "unknown gin configurable 'ut.SaveCheckpointConfig' in `ut.SaveCheckpointConfig.period "
        "= 7`; the gin files' imports bind no name `ut`: write SaveCheckpointConfig",
    ),
    "a dynamic file using another file's alias": (
        "train_script",
        [f"{DYNAMIC}train_script.train.eval_period = 4\n"],
        "{tmp}/override.gin:2: `train_script.train.eval_period = 4`: 'train_script' was not "
        "provided by an import statement (this file names configurables through its own "
        "imports: from __gin__ import dynamic_registration); add `import __main__ as "
        "train_script` to it",
    ),
    "the alias without T5X's run files": (
        None,
        ["--gin.train_script.train.eval_period=4"],
        "unknown gin configurable 'train_script.train' in `train_script.train.eval_period = 4`; "
        "the gin files' imports bind no name `train_script`: write train",
    ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_what_gin_refuses_is_one_line_saying_what_to_write(case, t5x_gin, tmp_path, capsys):
    alias, extra, expected = REFUSED[case]
    if extra[0].startswith(DYNAMIC):
        (tmp_path / "override.gin").write_text(extra[0])
        extra = [f"--gin_file={tmp_path / 'override.gin'}"]
    run = ALIASES[alias].run if alias else []
    status = _configure("train", run, tmp_path, t5x_gin, *extra)
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err, err
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert line == f"error: {expected.format(tmp=tmp_path)}"


@pytest.mark.parametrize(
    "flags, value",
    [
        (["--gin.train.eval_period=4", "--gin.train_script.train.eval_period=6"], 6),
        (["--gin.train_script.train.eval_period=6", "--gin.train.eval_period=4"], 4),
        (["--gin.train.eval_period=4", "--gin_bindings=train_script.train.eval_period = 6"], 6),
    ],
    ids=["alias last", "name alone last", "alias last in --gin_bindings"],
)
def test_of_both_spellings_on_the_command_line_the_later_wins(
    flags, value, t5x_gin, tmp_path, capsys
):
    """One binding written both ways: the later one, as gin reads one configurable."""
    status = _configure("train", ALIASES["train_script"].run, tmp_path, t5x_gin, *flags)
    assert status == 0, capsys.readouterr().err
    assert gin.query_parameter("train.eval_period") == value
