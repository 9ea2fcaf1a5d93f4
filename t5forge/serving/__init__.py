"""The HTTP inference server: `t5forge serve` and `t5forge.serve(...)`.

app (routes, auth, limits, errors) -> service (requests to rows and back) -> batcher (dynamic
batching on one device thread; continuous batching, one per decode lane) -> engine (bucketed
shapes, warm-up; lanes of decode slots) -> stepwise (per-row greedy/sampling, streamed) or the
model's beam search and scorer.

The package is `serving`, not `serve`, because `t5forge.serve` is the function: importing a
module of the same name would replace it on the `t5forge` module. Its names are imported on
first use: fastapi, uvicorn and prometheus-client come with the `serve` extra only, and a
plain install must still read the settings (`t5forge serve --help`) and get one line naming
the fix.
"""

import importlib

from t5forge.errors import T5ForgeError

# The `serve` extra's packages, as imported.
SERVE_EXTRA = ("fastapi", "uvicorn", "prometheus_client")
_EXPORTS = {
    "create_app": "t5forge.serving.app",
    "serve": "t5forge.serving.server",
    "InferenceService": "t5forge.serving.service",
    "ServerSettings": "t5forge.serving.settings",
}


def require_serve_extra() -> None:
    """Raises one line naming the fix when a package of the `serve` extra is missing."""
    for name in SERVE_EXTRA:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            raise T5ForgeError(
                f"serving needs {name}, which is not installed: pip install 't5forge[serve]'"
            ) from None


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module 't5forge.serving' has no attribute {name!r}")
    if name != "ServerSettings":
        require_serve_extra()
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["InferenceService", "ServerSettings", "create_app", "serve"]
