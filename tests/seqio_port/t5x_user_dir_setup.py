"""The T5X README's custom-task user directory (tests/seqio_port/t5x_user_dir, copied from the
README at T5X cc342d4), made runnable here by the one change the README leaves to the
user's machine: the vocabulary path."""

import shutil
import sys
from pathlib import Path

USER_DIR = Path(__file__).resolve().parent / "t5x_user_dir"
README_VOCABULARY = "gs://t5-data/vocabs/cc_all.32000/sentencepiece.model"


def write_user_dir(destination: Path, vocabulary: Path) -> Path:
    """A copy of the user directory whose tasks.py reads `vocabulary`."""
    shutil.copytree(USER_DIR, destination, dirs_exist_ok=True)
    tasks = destination / "tasks.py"
    text = tasks.read_text()
    assert text.count(README_VOCABULARY) == 1
    tasks.write_text(text.replace(README_VOCABULARY, str(vocabulary)))
    return destination


def load_user_tasks(destination: Path, vocabulary: Path) -> str:
    """Imports the copy's tasks.py as t5forge's commands do; the task's name."""
    from t5forge.data import TaskRegistry
    from t5forge.run.task_modules import import_task_modules

    write_user_dir(destination, vocabulary)
    TaskRegistry.remove("wmt_t2t_de_en_v003")
    sys.modules.pop("tasks", None)
    sys.path.insert(0, str(destination))
    try:
        import_task_modules(["tasks"])
    finally:
        sys.path.remove(str(destination))
        sys.modules.pop("tasks", None)
    return "wmt_t2t_de_en_v003"
