"""event_files.summary_writer: real TensorBoard event files, without tensorboardX pulling in
torch (2 s and ~190 MB per process), and torch still importable afterwards. In processes of
their own: what is imported is process-wide."""

import pytest
from commands import python
from event_files import read_event_scalars

SCRIPT = """
import sys
{before}
from t5forge import event_files

writer = event_files.summary_writer(sys.argv[1], purge_step=None)
writer.add_scalar("loss", 2.5, global_step=3)
writer.add_text("predictions", "Hallo Welt", global_step=3)
writer.flush()
writer.close()
print("torch loaded by the writer:", "torch" in sys.modules)
import torch  # the user's own import still works

print("torch", torch.__version__)
"""


@pytest.mark.parametrize("before", ["", "import torch"])
def test_events_are_written_and_torch_is_left_alone(tmp_path, before):
    pytest.importorskip("torch")
    result = python("-c", SCRIPT.format(before=before), tmp_path, check=True)
    loaded = "True" if before else "False"
    assert f"torch loaded by the writer: {loaded}" in result.stdout
    assert "torch 2." in result.stdout
    (events,) = tmp_path.glob("events.out.tfevents.*")
    tags = read_event_scalars(events)
    assert tags.pop("loss") == [(3, 2.5)]
    assert list(tags) == ["predictions/text_summary"]
