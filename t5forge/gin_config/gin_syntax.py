"""A malformed gin statement named by its file and line, or by its `--gin.` flag.

gin reads all flags as one text, so an unclosed `{` in one flag swallows the next ones, and
an unterminated bracket in a file ends in Python's tokenizer error with no file at all. Here
each flag, and each file gin read, is parsed alone with gin's own statement parser; the first
statement that does not parse is one line: where it was written, what it says, why it fails.
"""

from __future__ import annotations

import tokenize

from gin import config_parser

from t5forge import storage
from t5forge.errors import ConfigError

_FIX = (
    "write the value as gin does: a Python literal (strings quoted, brackets closed, "
    "e.g. {'inputs': 512, 'targets': 114}), a %MACRO or an @reference"
)


class _AnyReference(config_parser.ParserDelegate):
    """Accepts every `@name` and `%NAME`: only the syntax is checked here."""

    def configurable_reference(self, scoped_configurable_name, evaluate):
        return None

    def macro(self, macro_name):
        return None


def _first_failure(text: str) -> tuple[int, str] | None:
    """(line the failing statement starts on, gin's reason), or None when all parse."""
    lines = text.splitlines()
    try:
        parser = config_parser.ConfigParser(text, _AnyReference())
    except tokenize.TokenError as error:
        return 1, str(error.args[0])
    while True:
        start = parser.current_token.start[0]
        try:
            if parser.parse_statement() is None:
                return None
        except (SyntaxError, tokenize.TokenError, ValueError) as error:
            reason = error.msg if isinstance(error, SyntaxError) else str(error.args[0])
            while start <= len(lines) and lines[start - 1].strip()[:1] in ("", "#"):
                start += 1  # the statement starts after the blank and comment lines
            return start, str(reason).strip().splitlines()[-1].strip()  # gin's own words last


def flag_text(binding: str) -> str:
    """`--gin.NAME=VALUE` for a binding `NAME = VALUE` taken from the command line."""
    return f"--gin.{binding.replace(' = ', '=', 1)}"


def check_flags(bindings: list[str]) -> None:
    """Raises ConfigError naming the first `--gin.` flag whose binding does not parse."""
    for binding in bindings:
        failure = _first_failure(binding)
        if failure:
            raise ConfigError(f"{flag_text(binding)}: malformed gin value ({failure[1]}); {_FIX}")


def read_text(path) -> str:
    """A gin file's text; one line naming the file when it is not UTF-8 text (a binary file,
    a checkpoint or a vocabulary passed as --gin_file by mistake)."""
    data = storage.path(path).read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a gin file (byte {data[error.start]:#04x} at offset {error.start} is "
            "not UTF-8 text); pass a gin text file in --gin_file or `include`"
        ) from None


def check_files(paths: list[str]) -> None:
    """Raises ConfigError naming file:line of the first statement that does not parse."""
    for path in paths:
        text = read_text(path)
        failure = _first_failure(text)
        if failure:
            line, reason = failure
            written = text.splitlines()[line - 1].strip() if line <= len(text.splitlines()) else ""
            raise ConfigError(f"{path}:{line}: `{written}`: malformed gin value ({reason}); {_FIX}")
