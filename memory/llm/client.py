"""A small client for any OpenAI-compatible chat-completions endpoint, answering in JSON.

The `openai` package does the HTTP; this module adds what episode generation needs around it:
JSON mode, a per-request timeout, counted retries with exponential backoff on 408/409/429/5xx,
timeouts and connection errors (the package's own retries are switched off so every attempt is
counted), a concurrency limit shared by all threads, and token usage and latency per call.
Every failure surfaces as one typed `LLMError` with a ``kind``.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import openai

from memory.errors import EpimemError
from memory.llm.stats import Usage
from memory.tracing import traced

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

log = logging.getLogger("epimem.llm")

RETRYABLE_STATUS = frozenset({408, 409, 429})
MAX_BACKOFF_S = 30.0
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL | re.IGNORECASE)


class LLMError(EpimemError):
    """The LLM could not give a usable answer. ``kind`` says why (timeout, rate_limit, status_500,
    connection, invalid_json, schema, ...); ``attempts`` and ``usage`` say what it cost."""

    status_code = 502
    code = "llm_error"

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        attempts: int = 1,
        latency_seconds: float = 0.0,
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message, details={"kind": kind})
        self.kind = kind
        self.attempts = attempts
        self.latency_seconds = latency_seconds
        self.usage = usage or Usage()


@dataclass(frozen=True)
class JsonReply:
    data: dict[str, Any]
    attempts: int
    latency_seconds: float
    usage: Usage


def parse_json_object(text: str | None) -> dict[str, Any]:
    """The JSON object in a model's answer. Tolerates code fences and prose around the object
    (local models add them even in JSON mode); anything else is an ``invalid_json`` LLMError."""
    if text is None or not text.strip():
        raise LLMError("the LLM returned no content", kind="invalid_json")
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        start, end = body.find("{"), body.rfind("}")
        try:
            data = json.loads(body[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            data = None
        if data is None:
            raise LLMError(f"the LLM returned invalid JSON: {body[:200]!r}", kind="invalid_json") from None
    if not isinstance(data, dict):
        raise LLMError(f"the LLM returned JSON that is not an object: {type(data).__name__}", kind="invalid_json")
    return data


def _retry_after(error: openai.APIStatusError) -> float | None:
    value = error.response.headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _usage(response: Any) -> Usage:
    # Local servers may omit usage or fill it partly; the response is not validated strictly.
    usage = getattr(response, "usage", None)
    prompt = getattr(usage, "prompt_tokens", 0)
    completion = getattr(usage, "completion_tokens", 0)
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else 0,
        completion_tokens=completion if isinstance(completion, int) else 0,
    )


def _content(response: Any) -> str | None:
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise LLMError("the LLM response has no choices", kind="bad_response")
    content = getattr(getattr(choices[0], "message", None), "content", None)
    return content if isinstance(content, str) else None


class LLMClient:
    """Thread-safe. One instance is shared by the episode generator and the segmenter."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 30.0,
        max_retries: int = 3,
        concurrency: int = 4,
        backoff_s: float = 0.5,
        temperature: float = 0.2,
        max_tokens: int = 2048,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.max_retries = max_retries
        self.concurrency = concurrency
        self._backoff_s = backoff_s
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._sleep = sleep
        self._slots = threading.BoundedSemaphore(concurrency)
        # A local server usually needs no key, but the client insists on one.
        self._client = openai.OpenAI(
            api_key=api_key or "not-needed", base_url=base_url, timeout=timeout_s, max_retries=0
        )

    def close(self) -> None:
        self._client.close()

    @property
    def closed(self) -> bool:
        """Whether ``close()`` has released the HTTP connections."""
        return self._client.is_closed()

    @traced(
        "epimem.llm.chat",
        lambda self, _messages: {"model": self.model},
        lambda r: {"input_tokens": r.usage.prompt_tokens, "output_tokens": r.usage.completion_tokens},
    )
    def complete_json(self, messages: Sequence[dict[str, str]]) -> JsonReply:
        """One JSON object from the model, retrying transient failures; raises LLMError."""
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            try:
                with self._slots:
                    response = self._client.chat.completions.create(
                        model=self.model,
                        messages=cast("list[ChatCompletionMessageParam]", list(messages)),
                        response_format={"type": "json_object"},
                        temperature=self._temperature,
                        max_tokens=self._max_tokens,
                    )
            except (openai.APIStatusError, openai.APIConnectionError) as error:
                kind, retry_after = self._classify(error)
                retryable = (
                    kind in ("timeout", "connection", "rate_limit")
                    or kind.startswith("status_5")
                    or (isinstance(error, openai.APIStatusError) and error.status_code in RETRYABLE_STATUS)
                )
                if not retryable or attempt > self.max_retries:
                    raise LLMError(
                        f"LLM request failed after {attempt} attempt(s): {kind}",
                        kind=kind,
                        attempts=attempt,
                        latency_seconds=time.perf_counter() - started,
                    ) from error
                delay = self._backoff(attempt, retry_after)
                log.info("LLM %s, retry %d/%d in %.2fs", kind, attempt, self.max_retries, delay)
                self._sleep(delay)
                continue
            except (openai.OpenAIError, json.JSONDecodeError) as error:  # a body that is no chat completion
                raise LLMError(
                    f"LLM response unusable: {type(error).__name__}",
                    kind="bad_response",
                    attempts=attempt,
                    latency_seconds=time.perf_counter() - started,
                ) from error
            latency = time.perf_counter() - started
            usage = _usage(response)
            try:
                data = parse_json_object(_content(response))
            except LLMError as error:
                error.attempts, error.latency_seconds, error.usage = attempt, latency, usage
                raise
            return JsonReply(data=data, attempts=attempt, latency_seconds=latency, usage=usage)

    @staticmethod
    def _classify(error: openai.APIStatusError | openai.APIConnectionError) -> tuple[str, float | None]:
        if isinstance(error, openai.APITimeoutError):
            return "timeout", None
        if isinstance(error, openai.APIConnectionError):
            return "connection", None
        if isinstance(error, openai.RateLimitError):
            return "rate_limit", _retry_after(error)
        return f"status_{error.status_code}", _retry_after(error)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        delay = self._backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.0)  # jitter spreads retries
        if retry_after is not None:
            delay = max(delay, retry_after)
        return min(delay, MAX_BACKOFF_S)
