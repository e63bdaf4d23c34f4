"""Limits per key and per group, and what is used of them.

- ``requests_per_second`` (key, group): per server (``api.access.rates`` says why);
- ``messages_per_day`` (key, group): messages added per UTC day, shared by the deployment's servers
  (``api.access.counters`` over ``memory.store.usage``);
- ``stored_chars`` (group): characters of the messages the group holds, shared the same way; counted by
  every add and recounted from the group's log after anything else changes it (a deletion, a redaction,
  an import).

A key's limits are set on the key; a group's with ``PUT /v1/groups/{group_id}/limits``; the settings
give the defaults of both (none: unlimited). Over a limit: ``TooManyRequestsError`` (429) with
``Retry-After`` and ``details.limit`` naming it. An add reserves its messages before it runs and gives
back what was not stored (duplicates, a failure), so two batches admitted at once cannot both pass a
limit that only one fits.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol, TypeVar

from api.access.counters import SharedCounters
from api.access.rates import RateLimiter, Subject
from api.errors import TooManyRequestsError
from memory.store.keys import hashed_group
from memory.store.usage import CounterId
from memory.timeutil import utc_now

KEY_LIMITS = ("requests_per_second", "messages_per_day")
GROUP_LIMITS = (*KEY_LIMITS, "stored_chars")
STORED_RETRY_S = 3600  # stored characters free only when memory is deleted or the limit is raised
Limits = Mapping[str, float]


class _Content(Protocol):
    id: str
    content: str


class _Receipt(Protocol):
    @property
    def accepted(self) -> Sequence[str]: ...


R = TypeVar("R", bound=_Receipt)


class Quotas:
    def __init__(
        self,
        *,
        counters: SharedCounters,
        rates: RateLimiter,
        group_limits: Callable[[str], Limits],
        measure_chars: Callable[[str], int],
        key_defaults: Limits,
        group_defaults: Limits,
        now: Callable[[], datetime] = utc_now,
    ) -> None:
        self.counters = counters
        self.rates = rates
        self._group_limits = group_limits
        self._measure_chars = measure_chars
        self.key_defaults = {k: v for k, v in key_defaults.items() if v is not None}
        self.group_defaults = {k: v for k, v in group_defaults.items() if v is not None}
        self.clock = now  # what "today" is (tests move it)
        self._refusals: Counter[tuple[str, str]] = Counter()  # (limit, "key" | "group") -> 429s sent
        self._lock = threading.Lock()
        self._state_lock = threading.Lock()  # the refusals and _changed_groups
        self._changed_groups: dict[CounterId, str] = {}  # counters due for a recount -> their group

    def refusal_counts(self) -> dict[tuple[str, str], int]:
        with self._state_lock:
            return dict(self._refusals)

    def key_limits(self, limits: Limits) -> dict[str, float]:
        return {**self.key_defaults, **limits}

    def group_limits(self, group_id: str) -> dict[str, float]:
        return {**self.group_defaults, **self._group_limits(group_id)}

    def day(self) -> str:
        return self.clock().date().isoformat()

    # -- admission ---------------------------------------------------------------------------------

    def admit_request(self, key_id: str | None, key_limits: Limits, group_id: str | None) -> None:
        """One request of the key (None: local mode) to the group (None: not about one group)."""
        wanted: list[tuple[Subject, float]] = []
        scopes = []
        rate = self.key_limits(key_limits).get("requests_per_second") if key_id is not None else None
        if key_id is not None and rate:
            wanted.append((("key", key_id), rate))
            scopes.append("key")
        group_rate = self.group_limits(group_id).get("requests_per_second") if group_id is not None else None
        if group_rate:
            wanted.append((("group", str(group_id)), group_rate))
            scopes.append("group")
        refused = self.rates.take(wanted) if wanted else None
        if refused is not None:
            index, wait = refused
            self._refuse("requests_per_second", scopes[index], wanted[index][1], math.ceil(wait))

    def reserve(
        self,
        key_id: str | None,
        key_limits: Limits,
        group_id: str,
        messages: Sequence[_Content],
        stored: Callable[[list[str]], set[str]] | None = None,
    ) -> Reservation:
        """Count a batch before it is added (429 if a limit would be passed); settle or cancel it after.
        ``stored(ids)``: which of the ids the group holds already. Asked only when the batch would pass a
        limit: a retried batch then counts only what it adds (a retry of what was stored passes)."""
        day = self.day()
        subjects = [_group_counter("messages", group_id, day), _group_counter("chars", group_id, "all")]
        checks = []
        if key_id is not None:
            subjects.append(CounterId("messages", "key", key_id, day))
            limit = self.key_limits(key_limits).get("messages_per_day")
            if limit:
                checks.append((subjects[2], "messages_per_day", "key", limit))
        group = self.group_limits(group_id)
        if group.get("messages_per_day"):
            checks.append((subjects[0], "messages_per_day", "group", group["messages_per_day"]))
        if group.get("stored_chars"):
            checks.append((subjects[1], "stored_chars", "group", group["stored_chars"]))
        with self._lock:  # one batch at a time between a check and its reservation
            amounts = _amounts(subjects, messages)
            if checks:
                totals = self.counters.totals([c for c, *_ in checks if c.measure == "messages"])
                if any(c.measure == "chars" for c, *_ in checks):
                    totals.update(self.counters.totals([subjects[1]], measure=self._measure(group_id)))
                over = [check for check in checks if totals[check[0]] + amounts[check[0]] > check[3]]
                if over and stored is not None:
                    known = stored([m.id for m in messages])
                    messages = [m for m in messages if m.id not in known]
                    amounts = _amounts(subjects, messages)
                    over = [check for check in checks if totals[check[0]] + amounts[check[0]] > check[3]]
                for counter, name, scope, value in over[:1]:
                    retry = STORED_RETRY_S if name == "stored_chars" else self._seconds_to_midnight()
                    self._refuse(name, scope, value, retry, used=totals[counter], asked=amounts[counter])
            for counter, amount in amounts.items():
                self.counters.add(counter, amount)
        return Reservation(self.counters, amounts, {m.id: len(m.content) for m in messages})

    def counted(
        self,
        key_id: str | None,
        key_limits: Limits,
        group_id: str,
        messages: Sequence[_Content],
        add: Callable[[], R],
        stored: Callable[[list[str]], set[str]] | None = None,
    ) -> R:
        """``add()`` (an add of ``messages``) within the limits, its stored messages counted."""
        reservation = self.reserve(key_id, key_limits, group_id, messages, stored)
        try:
            receipt = add()
        except BaseException:
            reservation.cancel()
            raise
        reservation.settle(receipt.accepted)
        return receipt

    def _measure(self, group_id: str) -> Callable[[CounterId], int]:
        return lambda _counter: self._measure_chars(group_id)

    def changed(self, group_id: str) -> None:
        """A group's messages changed other than by an add: its stored characters are recounted."""
        counter = _group_counter("chars", group_id, "all")
        with self._state_lock:
            self._changed_groups[counter] = group_id
        self.counters.forget(counter)

    def recount_due(self) -> None:
        """Recount the groups changed by this server (the background refresh calls it)."""
        for counter in self.counters.due():
            with self._state_lock:
                group_id = self._changed_groups.pop(counter, None)
            if group_id is not None:
                self.counters.recount(counter, self._measure_chars(group_id))

    # -- usage -------------------------------------------------------------------------------------

    def key_usage(self, key_id: str) -> dict[str, int]:
        counter = CounterId("messages", "key", key_id, self.day())
        return {"messages_today": self.counters.totals([counter])[counter]}

    def group_usage(self, group_id: str) -> dict[str, int]:
        day = _group_counter("messages", group_id, self.day())
        chars = _group_counter("chars", group_id, "all")
        totals = self.counters.totals([day])
        totals.update(self.counters.totals([chars], measure=self._measure(group_id)))
        return {"messages_today": totals[day], "stored_chars": totals[chars]}

    def usage_today(self, groups: Iterable[str] = ()) -> dict[tuple[str, str], int]:
        """(kind, id) -> messages added today, for every key that added any, and those of ``groups`` (the
        counters name a group by its hash only) that did."""
        found = self.counters.period(self.day())
        named = {hashed_group(group): group for group in groups}
        today = {}
        for counter, total in found.items():
            if counter.measure != "messages":
                continue
            if counter.kind == "key":
                today[("key", counter.subject)] = total
            elif counter.subject in named:
                today[("group", named[counter.subject])] = total
        return today

    def _seconds_to_midnight(self) -> int:
        now = self.clock()
        midnight = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=now.tzinfo)
        return max(1, math.ceil((midnight - now).total_seconds()))

    def _refuse(self, name: str, scope: str, value: float, retry: int, *, used: int = 0, asked: int = 0) -> None:
        with self._state_lock:
            self._refusals[(name, scope)] += 1
        shown = f"{value:g}"
        what = {
            "requests_per_second": f"{shown} requests per second",
            "messages_per_day": f"{shown} messages per day (UTC)",
            "stored_chars": f"{shown} stored characters",
        }[name]
        details: dict[str, object] = {"limit": name, "scope": scope, "value": value, "retry_after": max(1, retry)}
        if name != "requests_per_second":
            details.update(used=used, asked=asked)
        raise TooManyRequestsError(
            f"over the {scope}'s limit of {what} ({name}); retry after {max(1, retry)} s",
            retry_after=max(1, retry),
            details=details,
        )


def _amounts(subjects: list[CounterId], messages: Sequence[_Content]) -> dict[CounterId, int]:
    chars = sum(len(m.content) for m in messages)
    return {counter: chars if counter.measure == "chars" else len(messages) for counter in subjects}


def _group_counter(measure: str, group_id: str, period: str) -> CounterId:
    """A group's counter, which names it by its hash: a deleted group's id stays in no counter."""
    return CounterId(measure, "group", hashed_group(group_id), period)


class Reservation:
    """A batch's counts, taken before the add: ``settle`` gives back what was not stored, ``cancel`` all."""

    def __init__(self, counters: SharedCounters, amounts: dict[CounterId, int], sizes: dict[str, int]) -> None:
        self._counters = counters
        self._amounts = amounts
        self._sizes = sizes

    def settle(self, accepted: Sequence[str]) -> None:
        stored = set(accepted)
        missing = [size for message_id, size in self._sizes.items() if message_id not in stored]
        for counter in self._amounts:
            self._counters.add(counter, -(sum(missing) if counter.measure == "chars" else len(missing)))

    def cancel(self) -> None:
        for counter, amount in self._amounts.items():
            self._counters.add(counter, -amount)
