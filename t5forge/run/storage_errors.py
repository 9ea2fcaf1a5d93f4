"""A full disk or a read-only file system, recognised whichever library hit it.

Python raises OSError, but TensorStore (orbax's array writer) raises ValueError ending in
"[os_error_code='28']" and safetensors "(os error 28)"; gin re-raises through a proxy whose
OSError fields are empty. These are the environment's problem, not a bug: the caller turns
them into one line saying what could not be written and what to do.
"""

from __future__ import annotations

import errno
import re

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
_CODE_IN_TEXT = re.compile(r"os_error_code='(\d+)'|\(os error (\d+)\)")


def original_attribute(error: BaseException, name: str):
    """`error.<name>` of the exception itself, also through gin's proxy (whose __getattr__
    reaches the original while the built-in OSError fields read None)."""
    value = getattr(error, name, None)
    forward = getattr(type(error), "__getattr__", None)
    return forward(error, name) if value is None and forward is not None else value


def storage_errno(error: BaseException) -> int | None:
    """ENOSPC, EROFS, ... behind `error`, or None when it is not a storage failure."""
    code = original_attribute(error, "errno") if isinstance(error, OSError) else None
    if code is None:
        match = _CODE_IN_TEXT.search(str(error))
        code = int(match.group(1) or match.group(2)) if match else None
    return code if code in STORAGE_ERRNOS else None
