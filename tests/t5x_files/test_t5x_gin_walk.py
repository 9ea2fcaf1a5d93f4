"""T5X's own 149 gin files, unchanged, under t5forge (../shared/t5x_gin, T5X at cc342d4).

Every file is parsed and its bindings checked in this process, with the command and overrides
a T5X user would give it (t5x_gin_commands.py), and the outcome must be its row of the table
(t5x_gin_states.py): it runs, or it is refused in one line naming the file and line of the
binding, for the row's reason (contrib/moe's run files go with a Flaxformer MoE model
file). One representative of each architecture and run kind then runs for real (2 train steps, eval, infer) from --gin_search_paths, as T5X's README commands
do; the built-in task en_de_lohelp_translate stands in for T5's TensorFlow WMT task (T5X
users' own tasks are issue 25's).
"""

from __future__ import annotations

import pytest
from commands import REPO
from gin_walk import check_outcome
from t5x_gin_commands import T5X_GIN, all_files, argv
from t5x_gin_states import STATES, readme_table

pytestmark = pytest.mark.skipif(
    not T5X_GIN.is_dir(), reason=f"T5X's gin files not found at {T5X_GIN}"
)


def test_the_table_has_a_row_for_every_file():
    assert list(STATES) == all_files()
    assert len(STATES) == 149


def test_the_docs_page_shows_the_table():
    page = (REPO / "docs" / "t5x-gin-files.md").read_text()
    assert readme_table() in page, "run: python tests/t5x_files/t5x_gin_states.py"


@pytest.mark.parametrize("path", list(STATES))
def test_file_parses_or_is_refused_in_one_line(path, tmp_path, capsys):
    command, args = argv(path, tmp_path)
    check_outcome(path, command, args, STATES[path], capsys)
