"""The Python API misused from a user's script, in a real subprocess: every mistake is one
T5ForgeError of one line (the script prints it as `error: ...`), never a traceback from deep
inside, and an input far over the model's limit is refused or truncated, never an OOM.

tests/test_api.py checks the same messages in process; here the script is what a user runs.
"""

from __future__ import annotations

import pytest

from .conftest import error_line

# A user's script: the call under test, its T5ForgeError printed as one line, exit status 2.
# Any other exception is Python's traceback and exit status 1, which error_line rejects.
SCRIPT = """
import sys, t5forge
from t5forge.errors import T5ForgeError
try:
    model = t5forge.load(sys.argv[1])
    {call}
except T5ForgeError as e:
    print(f"error: {{type(e).__name__}}: {{e}}", file=sys.stderr)
    sys.exit(2)
"""
LONG_TEXT = "' '.join(['word'] * 20_000)"  # built inside the script: 100 kB is no argument

MISUSES = {  # the call (model is the trained checkpoint) -> what the one line must say
    "load(12345)": (
        "t5forge.load(12345)",
        "CheckpointError: load takes a checkpoint path (str or os.PathLike), got int 12345",
    ),
    "load(None)": ("t5forge.load(None)", "got NoneType None"),
    "generate([123, None])": (
        "model.generate([123, None])",
        "DataError: inputs[0] is int 123; pass all strings or all lists",
    ),
    "generate(max_length=10**7)": (
        "model.generate(['a test'], max_length=10**7)",
        "ConfigError: max_length 10000000 is over the model's max_output_length",
    ),
    "20,000 words, policy 'refuse'": (
        f"model.generate([{LONG_TEXT}], max_length=4)",
        "DataError: inputs[0] has 20001 tokens, more than the model's max_input_length 32;",
    ),
    "save_hf under a file": (
        "model.save_hf(sys.argv[2] + '/a_file/hf')",
        "CheckpointError: cannot write the Hugging Face directory",
    ),
}


@pytest.mark.parametrize("misuse", sorted(MISUSES))
def test_api_misuse_is_one_line(faults, trained, tmp_path, misuse):
    call, expected = MISUSES[misuse]
    (tmp_path / "a_file").write_text("in the way")
    result = faults.run_python(SCRIPT.format(call=call), trained / "checkpoint_12", tmp_path)
    line = error_line(result)
    assert result.stderr.strip() == line and expected in line, result.stderr[-2000:]


def test_save_hf_into_a_missing_parent_creates_it(faults, trained, tmp_path):
    target = tmp_path / "new" / "parent" / "hf"
    call = "print(model.save_hf(sys.argv[2])); print(t5forge.load(sys.argv[2]).generate([[5, 1]]))"
    result = faults.run_python(SCRIPT.format(call=call), trained / "checkpoint_12", target)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == str(target)
    assert (target / "config.json").is_file()


def test_20000_words_with_policy_truncate_keep_the_head_in_bounded_memory(faults, trained):
    """Attention over 20,001 tokens would need gigabytes; the head of 32 tokens needs nothing.

    The peak is the script's own VmHWM: getrusage's ru_maxrss survives exec, so a child of a
    pytest worker that has grown to 4 GB reports the worker's peak, not its own."""
    call = f"""model.input_length_policy = 'truncate'
    print(len(model.encode([{LONG_TEXT}]).rows[0]))
    print(model.generate([{LONG_TEXT}], max_length=4))
    print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')))"""
    result = faults.run_python(SCRIPT.format(call=call), trained / "checkpoint_12")
    assert result.returncode == 0, result.stderr[-2000:]
    kept, generated, peak_kib = result.stdout.splitlines()
    assert int(kept) == 32 and generated.startswith("[")
    assert "truncated 1 of 1 inputs to the model's max_input_length 32" in result.stderr
    assert int(peak_kib) < 3 * 1024 * 1024, f"peak memory {int(peak_kib) >> 10} MiB"
