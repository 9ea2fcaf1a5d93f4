"""Users' task modules that misbehave, through the real commands: a SeqIO dataset preprocessor
(a function not decorated with `seqio.map_over_dataset`, whatever its parameter is called), a
metric that raises or returns something other than a dict of numbers, output features without
`targets`, a module with a syntax error, one that imports a package that is not installed, one
that raises while it is imported. Each is one `error:` line naming the module's file and line
(or the task and the step or metric), in every command that imports task modules.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from commands import t5forge_in_process

from faults.conftest import checkpoint_steps, error_line, in_process, one_error
from t5forge.data import Evaluator, TaskRegistry
from t5forge.errors import DataError
from t5forge.run.task_modules import import_task_modules

# The top of every module below: SeqIO's names, a FunctionDataSource of four rows and the
# session's vocabulary (T5FORGE_VOCAB, as the tiny model was trained with).
MODULE_HEAD = """
import functools
import os

import seqio

vocabulary = seqio.SentencePieceVocabulary(os.environ["T5FORGE_VOCAB"])
features = {"inputs": seqio.Feature(vocabulary), "targets": seqio.Feature(vocabulary)}
source = seqio.FunctionDataSource(
    lambda split, shuffle_files=False: [
        {"inputs": f"Click button {i}.", "targets": f"Klicken Sie auf Knopf {i}."}
        for i in range(4)
    ],
    splits=["train", "validation"],
)
tokenized = [seqio.preprocessors.tokenize, seqio.preprocessors.append_eos_after_trim]


def register(name, preprocessors=(), **kwargs):
    seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(
        name, source=source, preprocessors=[*preprocessors, *tokenized],
        output_features=kwargs.pop("output_features", features), **kwargs
    )
"""


def write_module(folder: Path, body: str, head: str = MODULE_HEAD) -> str:
    """Writes a task module into `folder` under a name of its own (modules imported in this
    process stay imported); its name for --module_import."""
    name = "user_tasks_" + re.sub(r"\W", "_", folder.parent.name)
    (folder / f"{name}.py").write_text(head + textwrap.dedent(body))
    return name


@pytest.fixture
def module_dir(tmp_path, monkeypatch, faults):
    """A folder on sys.path (and PYTHONPATH) for task modules, with the session's vocabulary;
    the tasks its modules register in this process are removed afterwards."""
    folder = tmp_path / "modules"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    for name, value in faults.env().items():
        if name.startswith("T5FORGE_"):
            monkeypatch.setenv(name, str(value))
    registered = set(TaskRegistry.names())
    yield folder
    for name in set(TaskRegistry.names()) - registered:
        TaskRegistry.remove(name)


def preview(module: str, task: str) -> list[str]:
    return ["tasks", "preview", task, f"--module_import={module}", "--split", "train"]


# SeqIO hands the whole tf.data dataset to every preprocessor not decorated with
# map_over_dataset, whatever its first parameter is named.
DATASET_PREPROCESSORS = {
    "first parameter not named ds": (
        "drop_short",
        """
        def drop_short(d):
            return d.filter(lambda ex: len(ex["inputs"]) > 3)
        register("with_step", [drop_short])
        """,
    ),
    "asks for sequence_length": (
        "trim",
        """
        def trim(examples, sequence_length):
            return examples
        register("with_step", [trim])
        """,
    ),
    "a functools.partial": (
        "add_prefix",
        """
        def add_prefix(dataset, prefix):
            return dataset.map(lambda ex: {**ex, "inputs": prefix + ex["inputs"]})
        register("with_step", [functools.partial(add_prefix, prefix="translate: ")])
        """,
    ),
    "a callable object": (
        "Lowercase",
        """
        class Lowercase:
            def __call__(self, ds):
                return ds
        register("with_step", [Lowercase()])
        """,
    ),
    "a lambda": ("<lambda>", 'register("with_step", [lambda ex: ex])'),
}


@pytest.mark.parametrize("case", sorted(DATASET_PREPROCESSORS))
def test_an_undecorated_preprocessor_is_a_dataset_preprocessor_refused_in_one_line(
    capsys, module_dir, case
):
    step, body = DATASET_PREPROCESSORS[case]
    module = write_module(module_dir, body)
    line = one_error(*in_process(capsys, *preview(module, "with_step")))
    assert f"task 'with_step': preprocessor {step} takes a tf.data dataset" in line, line
    assert "@seqio.map_over_dataset" in line, line


PER_EXAMPLE_STEPS = {
    "decorated": "@seqio.map_over_dataset",
    "decorated with num_parallel_calls": "@seqio.map_over_dataset(num_parallel_calls=4)",
}


@pytest.mark.parametrize("decorator", sorted(PER_EXAMPLE_STEPS))
def test_a_map_over_dataset_step_runs_per_example_whatever_its_parameter_is_called(
    capsys, module_dir, decorator
):
    module = write_module(
        module_dir,
        f"""
        {PER_EXAMPLE_STEPS[decorator]}
        def add_prefix(dataset, prefix="translate: "):
            return {{**dataset, "inputs": prefix + dataset["inputs"]}}
        register("per_example", [functools.partial(add_prefix, prefix="to German: ")])
        """,
    )
    assert t5forge_in_process(*preview(module, "per_example")) == 0
    shown = capsys.readouterr().out
    inputs = [line.strip() for line in shown.splitlines() if line.strip().startswith("inputs")]
    assert len(inputs) == 3, shown
    for i, line in enumerate(inputs):  # once per example, as SeqIO maps it
        assert re.fullmatch(rf"inputs \(\d+ tokens\): to German: Click button {i}\.", line), line


# What a metric function may do wrong, and what the line says about it.
BAD_METRICS = {
    "raises": ("raise ZeroDivisionError('division by zero')", "raised ZeroDivisionError"),
    "returns a float": ("return 0.5", "returned float 0.5, not a dict"),
    "returns None": ("return None", "returned NoneType None, not a dict"),
    "returns a list": ("return [0.5]", "returned list [0.5], not a dict"),
    "returns text for a value": ("return {'bleu': 'high'}", "returned 'high' for 'bleu'"),
}


def metric_module(folder: Path, returns: str) -> str:
    return write_module(
        folder,
        f"""
        def user_metric(targets, predictions):
            {returns}
        register("with_metric", metric_fns=[user_metric])
        """,
    )


@pytest.mark.parametrize("case", sorted(BAD_METRICS))
def test_a_metric_that_misbehaves_is_one_error_naming_task_and_metric(module_dir, tmp_path, case):
    returns, said = BAD_METRICS[case]
    import_task_modules([metric_module(module_dir, returns)])
    evaluator = Evaluator("with_metric", {"inputs": 16, "targets": 16}, 4, tmp_path / "eval")
    with pytest.raises(DataError) as error:
        evaluator.evaluate(predict_fn=lambda batch: batch["decoder_target_tokens"])
    message = str(error.value)
    assert message.startswith("task 'with_metric', metric user_metric") and said in message
    assert "\n" not in message


def eval_args(faults, trained, output, module) -> list[str]:
    return [
        "eval",
        f"--gin_file={faults.gin}",
        "--gin_file=runs/eval.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.EVAL_OUTPUT_DIR={output}",
        "--gin.MIXTURE_OR_TASK_NAME='with_metric'",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 8}",
        "--gin.evaluate.max_decode_length=2",
        f"--module_import={module}",
    ]


@pytest.mark.parametrize("case", ["raises", "returns a float"])
def test_eval_with_a_metric_that_misbehaves(faults, trained, module_dir, tmp_path, case):
    module = metric_module(module_dir, BAD_METRICS[case][0])
    result = faults.run(
        *eval_args(faults, trained, tmp_path / "eval", module),
        env=faults.env(PYTHONPATH=module_dir),
    )
    line = error_line(result)
    assert "task 'with_metric', metric user_metric" in line and BAD_METRICS[case][1] in line
    # What the model said is kept for the user debugging the metric.
    rows = (tmp_path / "eval" / "with_metric-predictions.jsonl").read_text().splitlines()
    assert len(rows) == 4 and all('"prediction": ' in row for row in rows)


@pytest.mark.slow
def test_training_keeps_its_checkpoints_when_a_periodic_evaluation_metric_raises(
    faults, module_dir, tmp_path
):
    """The metric works at the first evaluation (step 0) and raises at the second (step 3):
    the run stops in one line, checkpoint 2 stays and step 3 is saved before it stops."""
    module = write_module(
        module_dir,
        """
        calls = []

        def breaks_later(targets, predictions):
            calls.append(len(predictions))
            if len(calls) > 1:
                raise ValueError("the metric broke on its second call")
            return {"calls": len(calls)}
        register("with_metric", metric_fns=[breaks_later])
        """,
    )
    model_dir = tmp_path / "run"
    result = faults.train(
        model_dir,
        6,
        "--gin.MIXTURE_OR_TASK_NAME='with_metric'",
        "--gin.EVAL_PERIOD=3",
        f"--module_import={module}",
        period=2,
        quiet=False,
        lengths=(16, 8),
        batch=2,
        env=faults.env(PYTHONPATH=module_dir),
    )
    line = error_line(result)
    assert "task 'with_metric', metric breaks_later raised ValueError" in line, line
    assert checkpoint_steps(model_dir) == [2, 3]


def run_args(faults, trained, tmp_path, command: str, task: str, module: str) -> list[str]:
    """`command` (train, eval or infer) of the tiny model on `task`, registered by `module`."""
    flags = [f"--gin.MIXTURE_OR_TASK_NAME='{task}'", f"--module_import={module}"]
    if command == "train":
        return faults.train_args(tmp_path / "run", 2, *flags, lengths=(16, 8), batch=2)
    output = {"eval": "EVAL_OUTPUT_DIR", "infer": "INFER_OUTPUT_DIR"}[command]
    return [
        command,
        f"--gin_file={faults.gin}",
        f"--gin_file=runs/{command}.gin",
        "--gin.DROPOUT_RATE=0.0",
        f"--gin.CHECKPOINT_PATH={trained / 'checkpoint_12'}",
        f"--gin.{output}={tmp_path / 'out'}",
        "--gin.TASK_FEATURE_LENGTHS={'inputs': 16, 'targets': 8}",
        *flags,
    ]


@pytest.mark.parametrize("command", ["train", "eval", "infer"])
def test_output_features_without_targets(capsys, faults, trained, module_dir, tmp_path, command):
    module = write_module(
        module_dir,
        """
        def exact_match(targets, predictions):
            return {"exact_match": 0.0}
        register(
            "no_targets", output_features={"inputs": features["inputs"]},
            metric_fns=[exact_match],
        )
        """,
    )
    args = run_args(faults, trained, tmp_path, command, "no_targets", module)
    line = one_error(*in_process(capsys, *args))
    assert "task 'no_targets' has no output feature 'targets' (it has 'inputs')" in line, line
    assert "add 'targets': Feature(vocabulary)" in line, line


# Modules that fail while they are imported: (module text, the text of the failing line, what
# the one line says after the module's file and line).
BROKEN_MODULES = {
    "syntax error": (
        "import seqio\n\ndef to_inputs(:\n    return {}\n",
        "def to_inputs(:",
        "syntax error in a task module",
    ),
    "a package that is not installed": (
        "import seqio\nimport t5forge_absent_package.metrics\n",
        "import t5forge_absent_package.metrics",
        "the task module imports t5forge_absent_package, which is not installed; "
        "install it (pip install t5forge_absent_package",
    ),
    "an exception of its own": (
        "import seqio\n\nSETTINGS = {}\nlanguage = SETTINGS['language']\n",
        "language = SETTINGS['language']",
        "the task module raised KeyError: 'language' while it was imported",
    ),
}


def importing(command: str, module: str, faults, trained, tmp_path) -> list[str]:
    """The arguments of `command` importing the task module `module`."""
    if command == "gin import":  # a T5X gin file's `import tasks`
        gin_file = tmp_path / "imports_tasks.gin"
        gin_file.write_text(f"import {module}\n")
        return [*faults.train_args(tmp_path / "run", 2), f"--gin_file={gin_file}"]
    flag = f"--module_import={module}"
    if command in ("train", "eval", "infer"):
        return run_args(faults, trained, tmp_path, command, TASK_OF_BROKEN, module)
    return {
        "tasks list": ["tasks", "list", flag],
        "tasks show": ["tasks", "show", TASK_OF_BROKEN, flag],
        "tasks preview": preview(module, TASK_OF_BROKEN),
        "cache-tasks": [
            "cache-tasks",
            f"--tasks={TASK_OF_BROKEN}",
            f"--output_cache_dir={tmp_path / 'cache'}",
            flag,
        ],
        "vocab train": [
            "vocab",
            "train",
            f"--task={TASK_OF_BROKEN}",
            "--vocab_size=50",
            f"--output={tmp_path / 'spm.model'}",
            flag,
        ],
    }[command]


TASK_OF_BROKEN = "broken_module_task"
IMPORTING_COMMANDS = [
    "tasks list",
    "tasks show",
    "tasks preview",
    "cache-tasks",
    "vocab train",
    "train",
    "eval",
    "infer",
    "gin import",
]


@pytest.mark.parametrize("command", IMPORTING_COMMANDS)
@pytest.mark.parametrize("broken", sorted(BROKEN_MODULES))
def test_a_module_that_fails_to_import_is_one_line_naming_its_file_and_line(
    capsys, faults, trained, module_dir, tmp_path, broken, command
):
    text, failing_line, said = BROKEN_MODULES[broken]
    module = write_module(module_dir, text, head="")
    path = module_dir / f"{module}.py"
    line_number = text.splitlines().index(failing_line) + 1
    line = one_error(*in_process(capsys, *importing(command, module, faults, trained, tmp_path)))
    assert line.startswith(f"error: {path}:{line_number}: {said}"), line


# A step or a postprocessor of the user's that raises: the task, the function, the exception
# and the user's file and line where it was raised.
RAISING_STEP = """
@seqio.map_over_dataset
def to_question(ex):
    return {**ex, "inputs": ex["question"]}
register("raising_step", [to_question])
"""


@pytest.mark.parametrize("command", ["tasks preview", "train"])
def test_a_preprocessor_that_raises_is_one_line_naming_where(
    capsys, faults, trained, module_dir, tmp_path, command
):
    module = write_module(module_dir, RAISING_STEP)
    path = module_dir / f"{module}.py"
    number = path.read_text().splitlines().index('    return {**ex, "inputs": ex["question"]}')
    args = (
        preview(module, "raising_step")
        if command == "tasks preview"
        else run_args(faults, trained, tmp_path, "train", "raising_step", module)
    )
    line = one_error(*in_process(capsys, *args))
    assert line == (
        f"error: task 'raising_step', preprocessor to_question raised KeyError: 'question' "
        f"({path}:{number + 1})"
    ), line


def test_a_postprocessor_that_raises_is_one_line_naming_where(module_dir, tmp_path):
    module = write_module(
        module_dir,
        """
        def first_word(text, example=None, is_target=False):
            return text.split()[5]
        def exact_match(targets, predictions):
            return {"exact_match": 0.0}
        register("raising_postprocessor", postprocess_fn=first_word, metric_fns=[exact_match])
        """,
    )
    import_task_modules([module])
    with pytest.raises(DataError) as error:  # the targets are postprocessed first
        Evaluator("raising_postprocessor", {"inputs": 16, "targets": 16}, 4, tmp_path)
    assert str(error.value).startswith(
        "task 'raising_postprocessor', postprocess_fn first_word raised IndexError: list index "
        f"out of range ({module_dir / module}.py:"
    ), error.value


def test_a_refused_task_in_a_module_a_gin_file_imports_names_the_gin_line(
    capsys, faults, trained, module_dir, tmp_path
):
    step, body = DATASET_PREPROCESSORS["first parameter not named ds"]
    module = write_module(module_dir, body)
    line = one_error(
        *in_process(capsys, *importing("gin import", module, faults, trained, tmp_path))
    )
    assert line.startswith(
        f"error: {tmp_path / 'imports_tasks.gin'}:1: task 'with_step': preprocessor {step} takes "
        "a tf.data dataset"
    ), line
