"""The HTTP inference server: `t5forge serve` and `t5forge.serve(...)`.

app (routes, auth, limits, errors) -> service (requests to rows and back) -> batcher (dynamic
batching on one device thread) -> engine (bucketed shapes, warm-up) -> stepwise (per-row
greedy/sampling, streamed) or the model's beam search and scorer.

The package is `serving`, not `serve`, because `t5forge.serve` is the function: importing a
subpackage of the same name would replace it on the `t5forge` module.
"""

from t5forge.serving.app import create_app
from t5forge.serving.server import serve
from t5forge.serving.service import InferenceService
from t5forge.serving.settings import ServerSettings

__all__ = ["InferenceService", "ServerSettings", "create_app", "serve"]
