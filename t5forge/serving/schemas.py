"""The JSON the endpoints take and give, and every check a request passes before it queues.

Unknown fields are refused (a typo such as `top_n` must not be silently ignored), types are
strict (no "3" for 3), and each failure becomes one line naming the field and the fix.
Limits that depend on the server's settings (items per request, tokens, beams) are checked by
`check_limits` with the settings at hand.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from t5forge.serving.settings import ServerSettings
from t5forge.serving.stepwise import TOP_K_LIMIT

_SAMPLING_OPTIONS = ("temperature", "top_k", "top_p")


class RequestError(Exception):
    """A request the server refuses: HTTP status and a one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class NotUnicode(ValueError):
    """A text that is not Unicode (a lone surrogate from a JSON escape such as \\ud800): the
    body itself is bad, so it is a 400, as malformed JSON is."""


def check_unicode(name: str, texts: list[str]) -> None:
    for i, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise NotUnicode(
                f"{name}[{i}] holds a lone surrogate ({text[error.start]!r} at character "
                f"{error.start}), which is not a Unicode character; send valid UTF-8 text"
            ) from None


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    inputs: list[str] = Field(description="Input texts, one output per input")

    @model_validator(mode="after")
    def _no_empty_texts(self):
        for name in ("inputs", "targets"):
            texts = getattr(self, name, None)
            if texts is None:
                continue
            if not texts:
                raise ValueError(f"{name} is an empty list; send at least one text")
            check_unicode(name, texts)
            empty = [i for i, text in enumerate(texts) if not text.strip()]
            if empty:
                raise ValueError(f"{name}[{empty[0]}] is empty; send non-blank text")
        return self


class PredictRequest(_Request):
    """POST /v1/predict."""

    max_new_tokens: int | None = Field(
        None,
        description="Tokens to generate at most per input (default: the server's --max_new_tokens)",
    )
    method: Literal["greedy", "beam", "sample"] = "greedy"
    num_beams: int | None = Field(None, description="Beams for method 'beam' (default 4)")
    temperature: float | None = Field(None, description="Sampling temperature (default 1.0)")
    top_k: int | None = Field(
        None, description=f"Sample among the k most likely (<= {TOP_K_LIMIT}; 0: off)"
    )
    top_p: float | None = Field(
        None, description="Sample from the smallest set with this much probability (0: off)"
    )
    seed: int | None = Field(
        None,
        description="Sampling seed: the same seed and input give the same output, whatever "
        "else shares the batch. Without one the server draws a seed at random and returns it "
        "as the response's 'seed'",
    )
    return_scores: bool = Field(False, description="Also return each output's log-likelihood")
    stream: bool = Field(
        False, description="Send tokens as server-sent events as they are made (greedy and sample)"
    )

    @model_validator(mode="after")
    def _options_fit_the_method(self):
        given = [name for name in _SAMPLING_OPTIONS + ("seed",) if getattr(self, name) is not None]
        if self.method != "sample" and given:
            raise ValueError(f"{given[0]} applies to method 'sample', not {self.method!r}")
        if self.method != "beam" and self.num_beams is not None:
            raise ValueError(f"num_beams applies to method 'beam', not {self.method!r}")
        if self.stream and self.method == "beam":
            raise ValueError(
                "stream works with method 'greedy' or 'sample'; beam search only "
                "knows its output at the end"
            )
        if self.temperature is not None and not 0 <= self.temperature <= 100:
            raise ValueError(f"temperature must be in [0, 100], got {self.temperature}")
        if self.top_k is not None and not 0 <= self.top_k <= TOP_K_LIMIT:
            raise ValueError(f"top_k must be in [0, {TOP_K_LIMIT}], got {self.top_k}")
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError(f"top_p must be in [0, 1], got {self.top_p}")
        if (self.top_k or 0) > 0 and (self.top_p or 0) > 0:
            raise ValueError("use top_k or top_p, not both")
        if self.seed is not None and not 0 <= self.seed < 2**32:
            raise ValueError(f"seed must be in [0, 2**32), got {self.seed}")
        return self


class ScoreRequest(_Request):
    """POST /v1/score: the log-likelihood of each target given its input."""

    targets: list[str] = Field(description="One target text per input")

    @model_validator(mode="after")
    def _one_target_per_input(self):
        if len(self.targets) != len(self.inputs):
            raise ValueError(
                f"{len(self.inputs)} inputs but {len(self.targets)} targets; send "
                f"one target per input"
            )
        return self


class ClassifyRequest(_Request):
    """POST /v1/classify: rank classification, as T0's evaluation does it."""

    choices: list[str] | list[list[str]] = Field(
        description="The candidate answers: one list shared by all inputs, or one list per input"
    )

    def choices_per_input(self) -> list[list[str]]:
        if self.choices and isinstance(self.choices[0], list):
            return self.choices
        return [self.choices] * len(self.inputs)

    @model_validator(mode="after")
    def _choices_fit(self):
        per_input = self.choices_per_input()
        if len(per_input) != len(self.inputs):
            raise ValueError(
                f"{len(self.inputs)} inputs but {len(per_input)} lists of choices; "
                f"send one list per input or one shared list"
            )
        for i, choices in enumerate(per_input):
            if not choices:
                raise ValueError(f"choices for inputs[{i}] are empty; send at least one")
            if any(not c.strip() for c in choices):
                raise ValueError(f"choices for inputs[{i}] hold an empty text")
            check_unicode(f"choices for inputs[{i}]: choice", choices)
        return self


class PredictResponse(BaseModel):
    outputs: list[str]
    scores: list[float] | None = None
    seed: int | None = Field(
        None, description="method 'sample': the seed used (drawn when the request gave none)"
    )
    truncated: list[bool] = Field(
        description="Which inputs were cut to the model's maximum "
        "input length (input length policy 'truncate')"
    )


class ScoreResponse(BaseModel):
    scores: list[float]
    truncated: list[bool]


class RankedChoice(BaseModel):
    choice: str
    score: float


class Classification(BaseModel):
    prediction: str
    ranked: list[RankedChoice] = Field(description="Every choice, most likely first")


class ClassifyResponse(BaseModel):
    results: list[Classification]
    truncated: list[bool]


def check_limits(request: _Request, settings: ServerSettings) -> None:
    """RequestError (413 for size, 422 for values) when a request exceeds the server's limits."""
    rows = len(request.inputs)
    if isinstance(request, ClassifyRequest):
        rows = sum(len(c) for c in request.choices_per_input())
    if rows > settings.max_items:
        raise RequestError(
            413,
            f"the request holds {rows} items (inputs, or input-choice "
            f"pairs); the server takes at most {settings.max_items} per "
            f"request: split it",
        )
    if isinstance(request, PredictRequest):
        if request.max_new_tokens is not None and not (
            1 <= request.max_new_tokens <= settings.max_new_tokens_limit
        ):
            raise RequestError(
                422,
                f"max_new_tokens must be in [1, "
                f"{settings.max_new_tokens_limit}], got "
                f"{request.max_new_tokens}",
            )
        if request.num_beams is not None and not 1 <= request.num_beams <= settings.max_num_beams:
            raise RequestError(
                422, f"num_beams must be in [1, {settings.max_num_beams}], got {request.num_beams}"
            )
