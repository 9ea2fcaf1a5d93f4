"""The T5Config a gin file binds: model gin files (`T5Config.emb_dim = 512`), a run's config.gin.

`t5forge.load(config=<gin file>)` and conversions read a model config from gin without the
command line, so T5Config's gin registration lives here, on the library side;
t5forge.gin_config.gin_registry imports it beside every other name gin files may bind.
"""

from __future__ import annotations

import contextlib
import logging

import gin

from t5forge.models.configs import T5Config

# The model config under the name model gin files bind (`T5Config.emb_dim = 512`); its module
# stays t5forge.models.configs, so `configs.T5Config.*` in a run's config.gin reads back.
T5ConfigConfigurable = gin.external_configurable(T5Config, name="T5Config")


def config_from_gin() -> T5Config:
    """The T5Config the parsed gin files bind (`T5Config.<field> = ...`)."""
    return T5ConfigConfigurable()


def config_from_gin_file(path) -> T5Config:
    """The T5Config a model gin file (or a run's config.gin) binds, for `t5forge.load(...,
    config=file)`; bindings of names not registered with gin are skipped. A run in the same
    process finalizes (locks) gin's config; reading a model file is not a run, so it parses
    whatever the lock says."""
    with gin.unlock_config(), quiet_include_search():
        gin.parse_config_file(str(path), skip_unknown=True)
    return config_from_gin()


class _DropPathNotFound(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Path not found")


@contextlib.contextmanager
def quiet_include_search():
    """Leaves out the ERROR line gin logs for every search path an `include` is not in (here
    and in t5forge.gin_config's parsing): only a file found nowhere matters, and it raises."""
    root_logger, quiet = logging.getLogger(), _DropPathNotFound()
    root_logger.addFilter(quiet)
    try:
        yield
    finally:
        root_logger.removeFilter(quiet)
