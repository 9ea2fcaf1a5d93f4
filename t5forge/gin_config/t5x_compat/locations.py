"""Where each binding of a parse was written: file and line, or the `--gin.` flag.

gin keeps values, not where they came from, so the files gin read (in the order it read
them, includes inline) are parsed again with gin's own statement parser. Selectors in files
with `from __gin__ import dynamic_registration` are spelled out through the file's imports
(`train_script.train` -> `__main__.train`), so a statement can be matched to a T5X name.
"""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Iterable, Mapping, Sequence

from gin import config_parser

from t5forge import storage
from t5forge.gin_config import gin_internals
from t5forge.gin_config.t5x_compat.names import MODULE_ALIASES


class _Reference:
    """`@name` or `%NAME` as the statement parser saw it (only written back in messages)."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class _Delegate(config_parser.ParserDelegate):
    def configurable_reference(self, scoped_configurable_name, evaluate):
        return _Reference(f"@{scoped_configurable_name}{'()' if evaluate else ''}")

    def macro(self, macro_name):
        return _Reference(f"%{macro_name}")


@dataclasses.dataclass(frozen=True)
class Written:
    """One binding as written: `where` is 'file:line' or the command-line flag."""

    where: str
    scope: str
    selector: str
    full_selector: str
    param: str
    value: object
    dynamic: bool

    def text(self) -> str:
        scope = f"{self.scope}/" if self.scope else ""
        name = f"{scope}{self.selector}" + (f".{self.param}" if self.param else "")
        return f"{name} = {self.value!r}"


def nested_leaves(value) -> Iterable:
    """The values inside a parsed binding value, through its lists, tuples and dicts."""
    if isinstance(value, list | tuple):
        for item in value:
            yield from nested_leaves(item)
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from nested_leaves(item)
    else:
        yield value


class Locator:
    """The bindings of one parse in gin's order: `files_read` as recorded, then `flags`."""

    def __init__(self, files_read: Sequence[str], flags: Sequence[str]):
        self.statements: list[Written] = []
        self.imports: list[config_parser.ImportStatement] = []
        queue = list(files_read)
        while queue:
            self._walk(queue.pop(0), queue)
        for flag in flags:
            self._add(flag, f"--gin.{flag.replace(' = ', '=', 1)}", {}, dynamic=False)

    def _walk(self, path: str, queue: list[str]) -> None:
        text = storage.path(path).read_text()
        imports: dict[str, str] = {}
        dynamic = False
        for statement in self._parse(text, path):
            if isinstance(statement, config_parser.IncludeStatement) and queue:
                self._walk(queue.pop(0), queue)
            elif isinstance(statement, config_parser.ImportStatement):
                dynamic = dynamic or statement.module == "__gin__.dynamic_registration"
                module = statement.module
                path_of_name = (
                    module if statement.is_from or statement.alias else module.split(".")[0]
                )
                imports[statement.bound_name()] = path_of_name
                self.imports.append(statement)
            elif isinstance(statement, config_parser.BindingStatement):
                where = f"{path}:{statement.location.line_num}"
                self._record(where, statement, imports, dynamic)

    @staticmethod
    def _parse(text: str, name: str):
        stream = io.StringIO(text)
        stream.name = name
        return config_parser.ConfigParser(stream, _Delegate())

    def _add(self, text: str, where: str, imports: dict, dynamic: bool) -> None:
        for statement in self._parse(text, where):
            if isinstance(statement, config_parser.BindingStatement):
                self._record(where, statement, imports, dynamic)

    def _record(self, where, statement, imports, dynamic) -> None:
        head, _, rest = statement.selector.partition(".")
        full = statement.selector
        if dynamic and head in imports:
            module = MODULE_ALIASES.get(imports[head], imports[head])
            full = module + (f".{rest}" if rest else "")
        elif not dynamic:
            full = self._spelled_through_alias(statement.selector) or full
        self.statements.append(
            Written(
                where,
                statement.scope,
                statement.selector,
                full,
                statement.arg_name,
                statement.value,
                dynamic,
            )
        )

    def _spelled_through_alias(self, selector: str) -> str | None:
        """`train_script.train` written where gin looks it up through an earlier file's
        `import __main__ as train_script` (a flag, a file without dynamic registration):
        the T5X path, `__main__.train`."""
        for statement in reversed(self.imports):
            attributes = statement.alias and gin_internals.attributes_through(statement, selector)
            if attributes:
                module = MODULE_ALIASES.get(statement.module, statement.module)
                return ".".join([module, *attributes])
        return None

    def binding(self, scope: str, names: Sequence[str], param: str) -> Written | None:
        """The statement that bound `param` last for any of `names` (T5X path, gin name)."""
        for written in reversed(self.statements):
            if written.scope != scope or written.param != param:
                continue
            spelled_out = written.dynamic or written.full_selector != written.selector
            if spelled_out and written.full_selector in names:
                return written
            if not spelled_out and any(
                n == written.selector or n.endswith(f".{written.selector}") for n in names
            ):
                return written
        return None

    def flag_given_later(
        self, scope: str, names: Sequence[str], param: str, other: str, other_param: str
    ) -> bool:
        """Whether `param` of `names` was last bound by a flag given after the last binding
        of `other_param` of the configurable `other`: of two spellings of one binding on the
        command line (`train_script.train.eval_period`, `train.eval_period`) the later wins,
        as in gin."""
        mine = self.binding(scope, names, param)
        theirs = self.binding(scope, [other], other_param)
        if mine is None or theirs is None or not mine.where.startswith("--gin."):
            return False
        return self.statements.index(mine) > self.statements.index(theirs)

    def literal(self, text: str) -> Written | None:
        """The last statement whose value contains the string `text`."""
        for written in reversed(self.statements):
            if text in nested_leaves(written.value):
                return written
        return None
