"""The peer of benchmarks/serve_load.py: a minimal FastAPI server over CTranslate2, what a user
would otherwise deploy on a CPU, speaking the part of `t5forge serve`'s protocol the load uses.

`GET /healthz` answers 200 once the model is loaded and has decoded once; `POST /v1/predict`
takes {"inputs": [text], "max_new_tokens": n, "stream": true} and answers t5forge's server-sent
events (t5forge.serving.streaming): {"index", "token", "text"} per new token, then
{"index", "output", "truncated", "done"} and [DONE]. The text is encoded by t5forge's
SentencePiece vocabulary (extra ids included) + EOS and cut as `--input_length_policy truncate`
cuts it (the first max_input_length - 1 tokens + EOS); id i is the model's i-th CTranslate2
token (its shared_vocabulary.json, in id order). float32, as t5forge serves.

Batching is CTranslate2's own, as its API offers it: `translate_batch` batches the examples of
one call (sorted by length, in chunks of max_batch_size) but never merges separate calls, which
wait in its queue for one of its inter_threads translators. So whenever a translator is free,
this server hands it every request that arrived meanwhile (at most --max_batch_size) in one
asynchronous greedy call whose max_decoding_length and min_decoding_length are the longest
request's max_new_tokens. The call's batch is static: requests arriving during it wait for a
free translator. Tokens stream as they are decoded, through the call's per-token callback
(beam size 1), which also stops each request at its own max_new_tokens and stops the request of
a client that left (CTranslate2 4.8.5 stops just that example); so time to first token is
measured as for t5forge.

Threads: two one-thread translators (inter_threads 2, intra_threads 1) by default. On this
project's 2-core CPUs they beat one translator on both cores (inter_threads 1, intra_threads 2)
in a brief try under the serve_load workload (demo model, on a busy machine, so no figures):
as many requests/s at light loads with far lower latency, and more requests/s past
saturation. Splitting one small batch's matrix products over two cores costs more CPU-seconds
per token than it saves, and a request arriving during a call waits for the earlier of two
translators instead of the one.

    python benchmarks/serve_ct2.py --model CT2_DIR --spm SPIECE_MODEL --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import fastapi
import pydantic
from fastapi.responses import StreamingResponse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from t5forge.serving.streaming import TextDeltas, sse_event  # noqa: E402

EOS_ID = 1


class PredictRequest(pydantic.BaseModel):
    """The part of t5forge's /v1/predict body that this peer serves."""

    inputs: list[str] = pydantic.Field(min_length=1, max_length=1)
    max_new_tokens: int = pydantic.Field(ge=1)
    stream: bool


@dataclass
class Request:
    """One request's tokens on their way from CTranslate2's thread to its event stream: token
    ids, then None (or the exception that ended its call)."""

    source: list[str]
    max_new_tokens: int
    tokens: asyncio.Queue = field(default_factory=asyncio.Queue)
    gone: bool = False


class Batcher:
    """Hands CTranslate2 the waiting requests in one call whenever one of its translators is
    free."""

    def __init__(self, translator, max_batch_size: int, ids: dict[str, int]):
        self.translator, self.max_batch_size, self.ids = translator, max_batch_size, ids
        self.waiting: collections.deque[Request] = collections.deque()
        self.arrived = asyncio.Event()
        self.free = asyncio.Semaphore(translator.num_translators)
        self.calls: set[asyncio.Task] = set()

    def submit(self, request: Request) -> None:
        self.waiting.append(request)
        self.arrived.set()

    async def run(self) -> None:
        while True:
            await self.free.acquire()
            await self.arrived.wait()
            batch = []
            while self.waiting and len(batch) < self.max_batch_size:
                request = self.waiting.popleft()
                if not request.gone:
                    batch.append(request)
            if not self.waiting:
                self.arrived.clear()
            if not batch:
                self.free.release()
                continue
            call = asyncio.create_task(self._translate(batch))
            self.calls.add(call)  # held until done: the loop keeps only weak references
            call.add_done_callback(self.calls.discard)

    async def _translate(self, batch: list[Request]) -> None:
        """One greedy call over `batch`, streaming each request's tokens into its queue."""
        loop = asyncio.get_running_loop()

        def on_token(step) -> bool:  # on CTranslate2's thread; True stops this example
            request = batch[step.batch_id]
            loop.call_soon_threadsafe(request.tokens.put_nowait, self.ids[step.token])
            return request.gone or step.step + 1 >= request.max_new_tokens

        length = max(request.max_new_tokens for request in batch)
        end = None
        try:
            results = self.translator.translate_batch(
                [request.source for request in batch],
                asynchronous=True,
                beam_size=1,
                max_decoding_length=length,
                min_decoding_length=length,
                callback=on_token,
            )
            await asyncio.to_thread(lambda: [result.result() for result in results])
        except Exception as error:
            end = error
        finally:
            self.free.release()
        for request in batch:
            request.tokens.put_nowait(end)


def create_app(translator, vocabulary, tokens: list[str], max_input_length: int, max_batch_size):
    """The ASGI app: `tokens` is the model's CTranslate2 vocabulary, in id order."""
    batcher = Batcher(translator, max_batch_size, {token: i for i, token in enumerate(tokens)})

    async def events(request: Request, truncated: bool):
        deltas = TextDeltas(vocabulary)
        try:
            while (token := await request.tokens.get()) is not None:
                if isinstance(token, Exception):
                    raise token
                yield sse_event({"index": 0, "token": token, "text": deltas.add(token)})
            output = vocabulary.decode(deltas.tokens)
            yield sse_event({"index": 0, "output": output, "truncated": truncated, "done": True})
            yield sse_event("[DONE]")
        finally:
            request.gone = True

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        runner = asyncio.create_task(batcher.run())
        yield
        runner.cancel()

    app = fastapi.FastAPI(title="CTranslate2 peer of t5forge serve", lifespan=lifespan)

    @app.get("/healthz")
    async def healthz():
        return {"status": "ready"}

    @app.post("/v1/predict")
    async def predict(body: PredictRequest):
        if not body.stream:
            raise fastapi.HTTPException(422, "this peer answers stream=true requests only")
        ids = vocabulary.encode(body.inputs[0]) + [EOS_ID]
        truncated = len(ids) > max_input_length
        if truncated:
            ids = ids[: max_input_length - 1] + [EOS_ID]
        request = Request([tokens[i] for i in ids], body.max_new_tokens)
        batcher.submit(request)
        return StreamingResponse(events(request, truncated), media_type="text/event-stream")

    return app


def main() -> int:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", type=Path, required=True, help="a CTranslate2 model dir")
    parser.add_argument("--spm", type=Path, required=True, help="the SentencePiece model")
    parser.add_argument("--extra_ids", type=int, default=100, help="sentinels after its pieces")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max_batch_size", type=int, default=32, help="requests per call")
    parser.add_argument("--max_input_length", type=int, default=64, help="longer inputs are cut")
    parser.add_argument("--inter_threads", type=int, default=2, help="translators")
    parser.add_argument("--intra_threads", type=int, default=1, help="threads per translator")
    parser.add_argument("--log_level", default="warning")
    args = parser.parse_args()

    try:
        import ctranslate2
    except ImportError:
        sys.exit("error: ctranslate2 is not installed; pip install -e '.[bench]'")
    import uvicorn

    from t5forge.data import SentencePieceVocabulary

    vocabulary_file = args.model / "shared_vocabulary.json"
    if not vocabulary_file.is_file():
        sys.exit(f"error: {vocabulary_file} is missing; pass a CTranslate2 T5 model directory")
    tokens = json.loads(vocabulary_file.read_text())
    vocabulary = SentencePieceVocabulary(args.spm, extra_ids=args.extra_ids)
    translator = ctranslate2.Translator(
        str(args.model),
        device="cpu",
        compute_type="float32",
        inter_threads=args.inter_threads,
        intra_threads=args.intra_threads,
    )
    translator.translate_batch([[tokens[EOS_ID]]], beam_size=1, max_decoding_length=1)
    app = create_app(translator, vocabulary, tokens, args.max_input_length, args.max_batch_size)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)
    return 0


if __name__ == "__main__":
    sys.exit(main())
