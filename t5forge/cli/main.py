"""`t5forge <command> ...` (and `python -m t5forge <command> ...`): dispatches to one module
per command in t5forge.cli.

Each command module exposes `main(argv: list[str]) -> int` and a one-line `HELP`.
Exit statuses (docs/runs-and-failures.md, "What survives what"): 0 finished; 2 a user or
environment error (a T5ForgeError, a full disk, a read-only directory), reported as one
`error: ...` line; 128 + the signal number (143 SIGTERM, 130 Ctrl-C) when a run was stopped by
that signal after saving; 1 an internal error (a bug: Python's traceback).
"""

import importlib
import os
import sys

from t5forge.cli import absl_flags
from t5forge.cli.commands import COMMANDS
from t5forge.errors import T5ForgeError


def _usage() -> str:
    lines = ["usage: t5forge <command> [flags]", "", "commands:"]
    for name, command in COMMANDS.items():
        lines.append(f"  {name:<12} {command.summary}")
    lines.append("")
    lines.append("Run `t5forge <command> --help` for the flags of one command.")
    lines.append("T5X's `python -m t5x.main --run_mode=MODE ...` is `t5forge --run_mode=MODE ...`.")
    lines.append("Every command takes absl's flags (--alsologtostderr, --v, --flagfile, ...) and")
    lines.append("JAX's (--jax_*), as T5X's commands do.")
    return "\n".join(lines)


def run_command(module_name: str, argv: list[str]) -> int:
    """Runs one command module, after absl's and JAX's flags (cli/absl_flags.py), turning user
    errors into a single line."""
    module = importlib.import_module(f"t5forge.cli.{module_name}")
    try:
        return int(module.main(absl_flags.take(argv)) or 0)
    except T5ForgeError as e:
        # gin appends "In call to configurable ..." lines; the first line is the message.
        print(f"error: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from t5forge.run.preemption import Preempted
        from t5forge.run.storage_errors import original_attribute, storage_errno

        if isinstance(e, Preempted):
            print(str(e).splitlines()[0], file=sys.stderr)
            return e.exit_code
        code = storage_errno(e)
        if code is None:
            raise
        where = (  # a copy's or a rename's target is its second file name
            (original_attribute(e, "filename2") or original_attribute(e, "filename"))
            if isinstance(e, OSError)
            else None
        )
        print(
            f"error: cannot write {where or 'the output'}: {os.strerror(code)}; free space or "
            "choose a writable directory, then rerun",
            file=sys.stderr,
        )
        return 2


def _printable_anywhere() -> None:
    """Under a locale whose encoding cannot hold a text (LANG=C with PYTHONUTF8=0: ASCII),
    print such characters as \\x escapes instead of failing with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if hasattr(stream, "reconfigure") and encoding != "utf8":
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    _printable_anywhere()
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name.startswith("--"):  # no command: T5X main.py's form, --run_mode picks it
        return run_command("t5x_main", argv)
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if name == "serve" and not {"-h", "--help"} & set(rest):
        # Before the command's imports: the server runs on mimalloc (serving/allocator.py).
        from t5forge.serving.allocator import reexec_with_mimalloc

        reexec_with_mimalloc()
    return run_command(COMMANDS[name].module, rest)
