"""User-facing errors: one line that names the problem and the fix, never a traceback.

Library code raises `T5ForgeError` (or a subclass) for every mistake a user can make
(bad config, missing file, wrong shapes...). The command line catches it and prints
`error: <message>`; Python callers get an ordinary exception with the same message.
"""


class T5ForgeError(Exception):
    """A mistake in the user's input, reported as one line."""


class ConfigError(T5ForgeError, ValueError):
    """An unknown preset, a bad gin binding, an inconsistent configuration."""


class DataError(T5ForgeError, ValueError):
    """Missing or malformed data files, unknown tasks, empty splits, bad features."""


class CheckpointError(T5ForgeError, ValueError):
    """A checkpoint that is missing, corrupt, incomplete or does not match the model."""


class StorageError(T5ForgeError):
    """An object store refused or could not be reached (no bucket, no credentials, no answer)."""
