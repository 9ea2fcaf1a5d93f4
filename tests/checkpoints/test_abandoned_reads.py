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
