"""The counters of LLM-backed components, and the one interface every component that counts reports
them through (``Reporting.stats``: a snapshot that later counting does not change)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol, Self, TypeVar

S = TypeVar("S", covariant=True)


class Reporting(Protocol[S]):
    def stats(self) -> S: ...


@dataclass(frozen=True)
class Usage:
    """Tokens of one LLM reply."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass
class LLMCallStats:
    """What an LLM-backed component has done since start (exported as metrics).

    ``calls`` counts logical LLM requests, ``retries`` the extra attempts on top, ``fallbacks``
    the work done without the LLM because it failed, ``errors`` the failures by kind.
    """

    model: str
    calls: int = 0
    fallbacks: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)

    def record_call(self, attempts: int, latency: float, usage: Usage, *, error: str | None = None) -> None:
        """Count one logical request (callers hold their own lock)."""
        self.calls += 1
        self.retries += max(0, attempts - 1)
        self.latency_seconds += latency
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        if error is not None:
            self.errors[error] = self.errors.get(error, 0) + 1

    def snapshot(self) -> Self:
        """A copy that later counting does not change."""
        return replace(self, errors=dict(self.errors))
