"""Recall filters: only what given speakers said, in given roles, of given episode types, with given
metadata values. Every condition given must hold.

- ``speakers``: a message's speaker (its ``producer_id``, else its role) is one of them, named by
  id or by any name the ranking knows for it (retrieval.names: names set on the group or a session,
  names learned from the conversation); case does not matter;
- ``roles``: the message's role is one of them;
- ``metadata``: for every key, the message's ``metadata[key]`` or its episode's ``user_metadata[key]``
  equals the value (the same JSON type and value: ``1`` is not ``"1"`` nor ``true``);
- ``episode_types``: the episode is of one of these types.

An episode passes when its type passes and one of its messages passes (a summary, whose messages are
its sources', passes on its type and its own ``user_metadata`` alone, and never when speakers or
roles are asked for). Search returns the episodes that pass and names only the messages that pass;
context cites only messages that pass; the timeline lists the episodes that pass. An episode some of
whose messages do not pass is shown, in search hits and the timeline, as the messages that pass
(``shown``): its own title and content would tell what the others said.

Filters are checked here, in Python, on what the read path already holds: nothing of a filter ever
reaches the store as query syntax. Keys are plain names (1-100 characters, no leading ``$``, no
control characters); values are strings, numbers or booleans.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Protocol, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from memory.episodes.offline import offline_title
from memory.ids import MAX_ID_LENGTH
from memory.models import Episode, EpisodeType, GenerationMethod, Message, Role, Segment
from memory.readmodel.reader import GroupReader
from memory.store.records import VectorRecord
from memory.text import clip, message_line
from retrieval.speaker_names import speaker_names

MAX_KEY_LENGTH = 100
MAX_KEYS = 20
MAX_VALUE_LENGTH = 1000
SHOWN_CONTENT_CHARS = 4000  # an episode shown as the messages that pass a filter (``shown``)
Scalar = str | bool | int | float


def _speaker(value: str) -> str:
    if not value.strip():
        raise ValueError("a speaker must not be blank")
    return value


class RecallFilter(BaseModel):
    """Which messages and episodes recall may use (all given conditions hold)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    speakers: list[Annotated[str, Field(max_length=MAX_ID_LENGTH), AfterValidator(_speaker)]] | None = Field(
        default=None, min_length=1, max_length=100, description="speaker ids or names (producer_id; aliases count)"
    )
    roles: list[Role] | None = Field(default=None, min_length=1, max_length=4)
    episode_types: list[EpisodeType] | None = Field(default=None, min_length=1, max_length=2)
    metadata: dict[str, Scalar] | None = Field(
        default=None,
        description="exact values of message metadata or episode user_metadata; keys are plain names",
    )

    @field_validator("metadata", mode="before")
    @classmethod
    def _plain(cls, value: Any) -> Any:
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise ValueError("metadata must be an object of key -> value")
        if not 1 <= len(value) <= MAX_KEYS:
            raise ValueError(f"metadata takes 1 to {MAX_KEYS} keys")
        for key, item in value.items():
            _check_key(key)
            if item is None or not isinstance(item, str | bool | int | float):
                raise ValueError(f"metadata value of {key!r} must be a string, a number or a boolean")
            if isinstance(item, float) and not math.isfinite(item):
                raise ValueError(f"metadata value of {key!r} must be a finite number")
            if isinstance(item, str) and len(item) > MAX_VALUE_LENGTH:
                raise ValueError(f"metadata value of {key!r} is longer than {MAX_VALUE_LENGTH} characters")
        return dict(value)

    @property
    def asks_messages(self) -> bool:
        """Whether a condition is on messages (speakers or roles)."""
        return self.speakers is not None or self.roles is not None


def _check_key(key: Any) -> None:
    if not isinstance(key, str) or not key.strip():
        raise ValueError("metadata keys must be non-empty names")
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(f"metadata keys are at most {MAX_KEY_LENGTH} characters")
    if key.startswith("$"):
        raise ValueError(f"metadata key {key!r} looks like an operator: keys are plain names")
    if any(ord(char) < 32 or ord(char) == 127 for char in key):
        raise ValueError("metadata keys must not contain control characters")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: booleans are not numbers, numbers are not strings."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


class FilterMatch:
    """A filter bound to one group's speaker names."""

    def __init__(self, wanted: RecallFilter, names: Mapping[str, Iterable[str]]) -> None:
        self.filter = wanted
        self._speakers: set[str] | None = None
        if wanted.speakers is not None:
            asked = {s.strip().casefold() for s in wanted.speakers}
            self._speakers = set(asked)
            for speaker, others in names.items():
                if asked & ({speaker} | {n.casefold() for n in others}):
                    self._speakers.add(speaker)
        self._roles = {r.value for r in wanted.roles} if wanted.roles is not None else None
        self._types = {t.value for t in wanted.episode_types} if wanted.episode_types is not None else None

    def message(self, message: Message, episode: Episode | None = None) -> bool:
        wanted = self.filter
        if episode is not None and self._types is not None and episode.episode_type.value not in self._types:
            return False
        if self._speakers is not None and message.speaker.casefold() not in self._speakers:
            return False
        if self._roles is not None and message.role.value not in self._roles:
            return False
        if wanted.metadata:
            own = episode.user_metadata if episode is not None else {}
            for key, value in wanted.metadata.items():
                if not (_same(message.metadata.get(key), value) or _same(own.get(key), value)):
                    return False
        return True

    def episode(self, episode: Episode, messages: Iterable[Message]) -> bool:
        if self._types is not None and episode.episode_type.value not in self._types:
            return False
        if episode.source_episode_ids:  # a summary
            if self.filter.asks_messages:
                return False
            wanted = self.filter.metadata or {}
            return all(_same(episode.user_metadata.get(k), v) for k, v in wanted.items())
        return any(self.message(m, episode) for m in messages)


class Ranked(Protocol):
    """A ranked record (retrieval.candidates.Candidate)."""

    @property
    def record(self) -> VectorRecord: ...

    @property
    def episode_id(self) -> str: ...

    @property
    def is_message(self) -> bool: ...


C = TypeVar("C", bound=Ranked)


def filter_match(group: GroupReader, wanted: RecallFilter) -> FilterMatch:
    """The filter bound to the group's speakers' names."""
    return FilterMatch(wanted, speaker_names(group))


def shown_episodes(group: GroupReader, match: FilterMatch, episodes: list[Episode]) -> dict[str, Episode]:
    """The episodes that pass the filter, by id, each as the filter shows it (``shown``)."""
    messages = group.messages([e for e in episodes if not e.source_episode_ids])
    found = {}
    for episode in episodes:
        own = messages.get(episode.uuid, [])
        if match.episode(episode, own):
            found[episode.uuid] = shown(episode, own, [m for m in own if match.message(m, episode)])
    return found


def shown(episode: Episode, messages: Sequence[Message], passing: Sequence[Message]) -> Episode:
    """An episode as a filter shows it: whole when every one of its ``messages`` passes (and a summary always);
    otherwise its title and content would tell what the messages that do not pass said, so it is shown as the
    ``passing`` messages alone: their lines (clipped to ``SHOWN_CONTENT_CHARS``) as its content, a title made of
    them, their ids as its sources (its id, type, time and user_metadata stay)."""
    if episode.source_episode_ids or len(passing) == len(messages) or not passing:
        return episode
    ordered = sorted(passing, key=lambda m: m.timestamp)
    segment = Segment(messages=tuple(ordered), boundary_reason=episode.boundary_reason)
    return episode.model_copy(
        update={
            "title": offline_title(segment),
            "content": clip("\n".join(message_line(m) for m in ordered), SHOWN_CONTENT_CHARS),
            "source_message_ids": tuple(m.id for m in ordered),
            "message_count": len(ordered),
            "generation": GenerationMethod.OFFLINE,
        }
    )


def passing_candidates(group: GroupReader, match: FilterMatch, candidates: Sequence[C]) -> list[C]:
    """The candidates whose episode passes and, for a message, whose message passes too."""
    episodes = group.episodes(sorted({c.episode_id for c in candidates}))
    messages = group.messages([e for e in episodes.values() if not e.source_episode_ids])
    passing = {e for e, episode in episodes.items() if match.episode(episode, messages.get(e, []))}
    by_id = {(e, m.id): m for e, found in messages.items() for m in found}
    kept = []
    for candidate in candidates:
        if candidate.episode_id not in passing:
            continue
        if candidate.is_message:
            message = by_id.get((candidate.episode_id, candidate.record.message_id))
            if message is None or not match.message(message, episodes[candidate.episode_id]):
                continue
        kept.append(candidate)
    return kept
