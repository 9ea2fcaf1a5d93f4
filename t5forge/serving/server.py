"""`t5forge.serve(...)`: load a model and run the HTTP server until SIGTERM or Ctrl-C.

uvicorn owns the signals: on SIGTERM or SIGINT it stops accepting connections, lets the
requests in flight finish (their rows are already queued, and the batcher keeps running
until the app's lifespan ends), then shuts the service down. It then re-raises the signal it
caught; for SIGTERM the drain is complete by then, so `serve` returns normally (exit 0), while
SIGINT still ends in KeyboardInterrupt as Ctrl-C should.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading

from t5forge.errors import ConfigError
from t5forge.serving.app import create_app
from t5forge.serving.connections import head_deadline_protocol
from t5forge.serving.service import InferenceService
from t5forge.serving.settings import ServerSettings

logger = logging.getLogger(__name__)

# How long in-flight requests may take to finish after SIGTERM before connections are cut.
GRACEFUL_SHUTDOWN_S = 60


def load_for_serving(
    checkpoint, vocab=None, extra_ids: int = 100, config=None, weights_dtype=None, dtype=None
):
    """A Model from anything `t5forge.load` reads (with its `weights_dtype` and activation
    `dtype`); `vocab` (a SentencePiece model with `extra_ids` sentinels) replaces or supplies
    its vocabulary."""
    from t5forge.api import Model, load
    from t5forge.data.vocabularies import SentencePieceVocabulary

    if isinstance(checkpoint, Model):
        if dtype is not None:
            raise ConfigError(
                "dtype= applies when loading; pass it to t5forge.load, or serve a path"
            )
        model = checkpoint
        if weights_dtype is not None:
            model.set_weights_dtype(weights_dtype)
    else:
        model = load(checkpoint, config=config, weights_dtype=weights_dtype, dtype=dtype)
    if vocab is not None:
        model.vocabulary = SentencePieceVocabulary(vocab, extra_ids=extra_ids)
    return model


def serve(
    checkpoint,
    *,
    vocab=None,
    extra_ids: int = 100,
    config=None,
    weights_dtype=None,
    dtype=None,
    settings: ServerSettings | None = None,
    log_level: str = "info",
    **setting_values,
) -> None:
    """Serves a model over HTTP until stopped (SIGTERM/SIGINT drain in-flight requests).

    `checkpoint` is a path `t5forge.load` accepts or an already loaded `t5forge.api.Model`;
    `config`, `weights_dtype` ('float32', 'bfloat16' or 'int8') and `dtype` (the activation
    dtype) as for `t5forge.load` (T5X checkpoints need a config); `vocab` replaces or supplies its
    vocabulary; any ServerSettings field may be given as a keyword (host, port,
    max_batch_size, api_key...).
    """
    import uvicorn

    if settings is None:
        settings = ServerSettings(**setting_values)
    elif setting_values:
        raise ConfigError("pass either settings= or individual settings, not both")
    model = load_for_serving(checkpoint, vocab, extra_ids, config, weights_dtype, dtype)
    service = InferenceService(model, settings)
    server_config = uvicorn_config(create_app(service), settings, log_level)
    logger.info("serving on http://%s:%d (docs at /docs)", settings.host, settings.port)
    with _sigterm_after_drain_is_success():
        uvicorn.Server(server_config).run()


def uvicorn_config(app, settings: ServerSettings, log_level: str = "info"):
    """How uvicorn runs the app: h11 with request-head deadlines, graceful SIGTERM."""
    import uvicorn

    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
        access_log=False,
        http=head_deadline_protocol(settings.header_timeout_s),
    )


@contextlib.contextmanager
def _sigterm_after_drain_is_success():
    """Makes the SIGTERM uvicorn re-raises after its graceful shutdown a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
