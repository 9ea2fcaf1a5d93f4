"""The filter for a failed read's stray completions drops exactly those, in a process of its
own (sys.unraisablehook is process-wide, and pytest swaps it around every test)."""

from commands import python

SCRIPT = """
import asyncio
from t5forge.checkpoints import abandoned_reads

closed_loop = asyncio.new_event_loop()
closed_loop.close()

class StrayCompletion:  # a read's callback arriving after its loop closed
    def __del__(self):
        closed_loop.call_soon_threadsafe(print)

class OtherFailure:
    def __del__(self):
        raise ValueError("this one must still be printed")

abandoned_reads.drop_stray_completions()
abandoned_reads.drop_stray_completions()  # twice: still one filter, not a chain of them
StrayCompletion()
OtherFailure()
print("done")
"""


def test_only_completions_on_a_closed_loop_are_dropped():
    result = python("-c", SCRIPT, check=True)
    assert result.stdout == "done\n"
    assert "Event loop is closed" not in result.stderr, result.stderr
    assert result.stderr.count("Traceback") == 1, result.stderr
    assert "ValueError: this one must still be printed" in result.stderr


def test_without_the_filter_python_prints_the_completion():
    """The case the filter exists for is real: Python reports it as unraisable."""
    result = python(
        "-c", SCRIPT.replace("abandoned_reads.drop_stray_completions()", ""), check=True
    )
    assert "RuntimeError: Event loop is closed" in result.stderr, result.stderr


UNCOLLECTED = """
import asyncio, gc, logging, sys, tempfile
import tensorstore as ts
from t5forge.checkpoints import abandoned_reads

logging.basicConfig()
if sys.argv[1] == "filtered":
    abandoned_reads.drop_stray_completions()


async def main():
    missing = tempfile.mkdtemp() + "/no_array"
    spec = {"driver": "zarr", "kvstore": {"driver": "file", "path": missing}}
    read = asyncio.ensure_future(ts.open(spec, open=True))  # a read nobody collects

    async def other():
        raise ValueError("not a read: must still be logged")

    task = asyncio.ensure_future(other())
    await asyncio.sleep(0.5)
    del read, task
    gc.collect()


asyncio.run(main())
print("done")
"""


def test_an_uncollected_tensorstore_failure_is_dropped_and_nothing_else():
    """The second channel (CI of session 14's stop): asyncio logs a sibling read's failure that nobody
    awaited, with its traceback; a real TensorStore read fails here, beside another task."""
    unfiltered = python("-c", UNCOLLECTED, "plain", check=True)
    assert unfiltered.stderr.count("Task exception was never retrieved") == 2, unfiltered.stderr
    assert "tensorstore_spec=" in unfiltered.stderr

    filtered = python("-c", UNCOLLECTED, "filtered", check=True)
    assert filtered.stdout == "done\n"
    assert filtered.stderr.count("Task exception was never retrieved") == 1, filtered.stderr
    assert "tensorstore_spec=" not in filtered.stderr
    assert "ValueError: not a read: must still be logged" in filtered.stderr
