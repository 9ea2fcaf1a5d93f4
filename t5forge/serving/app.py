"""The HTTP surface: FastAPI routes, bearer-token check, size limits and one-line JSON errors.

Every refusal is `{"error": "<one line>"}` with a 4xx/5xx status, and none of them disturbs
the requests around it. Requests the server cannot take now (queue full, still warming up)
get 503 with Retry-After. A client that disconnects while its rows wait has them cancelled
before they reach the device. The OpenAPI page is at /docs (schema at /openapi.json).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from t5forge.serving.batcher import QueueFull
from t5forge.serving.metrics import ServerMetrics
from t5forge.serving.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    NotUnicode,
    PredictRequest,
    PredictResponse,
    RequestError,
    ScoreRequest,
    ScoreResponse,
    check_limits,
)
from t5forge.serving.service import InferenceService
from t5forge.serving.settings import ServerSettings
from t5forge.version import __version__

_ENDPOINTS = ("/v1/predict", "/v1/score", "/v1/classify")
_CLIENT_CLOSED = 499  # nginx's code for "client closed request"; nobody receives it


def _error(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split())}, status, headers=headers)


def _validation_message(error: RequestValidationError) -> str:
    """The first problem as `field: what is wrong` (pydantic's prefixes trimmed)."""
    first = error.errors()[0]
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})"
    if tuple(first.get("loc", ())) == ("body",) and first.get("type") != "value_error":
        # Not JSON at all, or JSON that is not an object (a model check's error is fine).
        return (
            "the body must be a JSON object with this endpoint's fields, sent with "
            "Content-Type: application/json"
        )
    location = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if first.get("type") == "extra_forbidden":
        message = "unknown field; see /docs for the fields this endpoint takes"
    return f"{location}: {message}" if location else message


class _Guard:
    """Pure ASGI middleware every request passes: API key, body size, request metrics.

    It runs before FastAPI parses anything, so an unauthorized or oversized request costs
    nothing, and (unlike BaseHTTPMiddleware) it leaves `receive` alone for the handlers'
    disconnect detection.
    """

    def __init__(self, app, settings: ServerSettings, metrics: ServerMetrics):
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.expected = f"Bearer {settings.api_key}".encode() if settings.api_key else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path, headers = scope["path"], dict(scope.get("headers", ()))
        started, status = time.perf_counter(), [500]

        async def send_counting(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            refusal = self._refusal(path, headers)
            if refusal is not None:
                return await refusal(scope, receive, send_counting)
            await self._app_with_body_limit(scope, receive, send_counting)
        finally:
            if path.startswith("/v1/"):
                # Unknown paths share one label, so clients cannot grow the metrics at will.
                endpoint = path if path in _ENDPOINTS else "other"
                self.metrics.requests.labels(endpoint=endpoint, status=str(status[0])).inc()
                self.metrics.latency.labels(endpoint=endpoint).observe(
                    time.perf_counter() - started
                )

    def _refusal(self, path: str, headers: dict) -> JSONResponse | None:
        if b"transfer-encoding" in headers and b"content-length" in headers:
            # Two framings: a proxy in front may have read the other one, so whatever follows
            # this request on the connection cannot be trusted as the next request (request
            # smuggling). Refused, and the connection closed after the answer.
            self.metrics.rejected.labels(reason="ambiguous_framing").inc()
            return _error(
                400,
                "the request has both Content-Length and Transfer-Encoding; send one of them",
                {"Connection": "close"},
            )
        protected = path.startswith("/v1/") or path == "/metrics"
        given = headers.get(b"authorization", b"")
        if (
            protected
            and self.expected is not None
            and not hmac.compare_digest(given, self.expected)
        ):
            self.metrics.rejected.labels(reason="unauthorized").inc()
            return _error(
                401,
                "missing or wrong API key; send 'Authorization: Bearer <key>'",
                {"WWW-Authenticate": "Bearer"},
            )
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.settings.max_body_bytes:
            return self._too_large()
        return None

    def _too_large(self) -> JSONResponse:
        self.metrics.rejected.labels(reason="too_large").inc()
        return _error(
            413,
            f"the body is larger than the server's limit of "
            f"{self.settings.max_body_bytes} bytes; send fewer or shorter inputs",
        )

    async def _app_with_body_limit(self, scope, receive, send):
        """Runs the app; a body without Content-Length that grows past the limit is answered
        413 here, and the app sees the client leave (what it would send is dropped)."""
        seen, refused = 0, False

        async def limited_receive():
            nonlocal seen, refused
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.settings.max_body_bytes and not refused:
                refused = True
                await self._too_large()(scope, receive, send)
                return {"type": "http.disconnect"}
            return message

        async def send_unless_refused(message):
            if not refused:
                await send(message)

        await self.app(scope, limited_receive, send_unless_refused)


async def _until_disconnected(request: Request) -> None:
    """Returns when the client closes the connection (the body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(service: InferenceService) -> FastAPI:
    """The ASGI app serving `service`; its lifespan starts and stops the service."""
    settings, metrics = service.settings, service.metrics

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await service.start()
        yield
        await service.stop()

    app = FastAPI(
        title="t5forge",
        version=__version__,
        lifespan=lifespan,
        description="Generation, scoring and rank classification with a T5-family "
        "model, dynamically batched.",
    )

    @app.exception_handler(RequestError)
    async def _request_error(_request, error: RequestError):
        headers = {"Retry-After": str(settings.retry_after_s)} if error.status == 503 else None
        return _error(error.status, str(error), headers)

    @app.exception_handler(QueueFull)
    async def _queue_full(_request, error: QueueFull):
        metrics.rejected.labels(reason="queue_full").inc()
        return _error(
            503,
            f"the server is at capacity ({error}); retry after {settings.retry_after_s} s",
            {"Retry-After": str(settings.retry_after_s)},
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, error: RequestValidationError):
        message = _validation_message(error)
        not_unicode = isinstance(error.errors()[0].get("ctx", {}).get("error"), NotUnicode)
        return _error(400 if not_unicode or message.startswith("the body ") else 422, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request, error: StarletteHTTPException):
        return _error(error.status_code, str(error.detail), getattr(error, "headers", None))

    async def answer(request: Request, body, work):
        """Runs work(body) unless the client leaves first (then its rows are cancelled)."""
        check_limits(body, settings)
        task = asyncio.ensure_future(work(body))
        gone = asyncio.ensure_future(_until_disconnected(request))
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        if task.done():
            return task.result()
        task.cancel()
        metrics.disconnects.inc()
        return _error(_CLIENT_CLOSED, "the client closed the connection")

    @app.post(
        "/v1/predict",
        response_model=PredictResponse,
        response_model_exclude_none=True,
        responses={
            200: {
                "content": {"text/event-stream": {}},
                "description": "JSON, or server-sent events with stream=true",
            }
        },
    )
    async def predict(request: Request, body: PredictRequest):
        """Generates one output per input (greedy, beam search or sampling)."""
        if body.stream:
            check_limits(body, settings)
            return StreamingResponse(
                service.stream(body),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache"},
            )
        return await answer(request, body, service.predict)

    @app.post("/v1/score", response_model=ScoreResponse)
    async def score(request: Request, body: ScoreRequest):
        """Log-likelihood of each target given its input (sum over the target's tokens)."""
        return await answer(request, body, service.score)

    @app.post("/v1/classify", response_model=ClassifyResponse)
    async def classify(request: Request, body: ClassifyRequest):
        """Rank classification: every choice scored as a target, most likely first."""
        return await answer(request, body, service.classify)

    @app.get("/healthz")
    async def healthz():
        """200 once generation's shapes are compiled (scoring's and beam search's may still be
        compiling); 503 while warming up. Both list each shape's state ('waiting',
        'compiling', 'ready', 'failed'), in the order they compile."""
        shapes = dict(service.shapes)
        compiled = sum(state == "ready" for state in shapes.values())
        if service.ready:
            return {"status": "ready", "compiled": compiled, "of": len(shapes), "shapes": shapes}
        return JSONResponse(
            {"status": "warming up", "compiled": compiled, "of": len(shapes), "shapes": shapes},
            503,
            headers={"Retry-After": str(settings.retry_after_s)},
        )

    @app.get("/metrics")
    async def prometheus():
        """Prometheus text format: requests, latency, batch sizes, queue depth, tokens."""
        metrics.queue_depth.set(service.depth)
        return Response(metrics.render(), media_type=metrics.content_type)

    app.add_middleware(_Guard, settings=settings, metrics=metrics)
    return app
