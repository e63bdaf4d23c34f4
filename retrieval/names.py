"""The names people use for the speakers of a group: their ids, names a client sets, names learned.

A speaker is often called by a name that is not its id (the id ``elise`` of a chat where the other
person writes "Hey Kate!", or a user id like ``u-193``). A query that names a person ("What are
Kate's hobbies?") should find that speaker's messages. Names come from three places:

- the speaker id itself;
- metadata a client sets on the group (``PUT /groups/{group}``) or on a session
  (``PUT /groups/{group}/sessions/{session}``): ``metadata["speakers"]`` maps a speaker id to
  ``{"display_name": "Kate", "aliases": ["Katie", "K"]}``; a session's names count for the whole group;
- names learned from the conversation: a capitalised word that one speaker uses to address the other
  ("Hey Kate!", "Thank you Kate, ...", "What about you Kate?") at least ``MIN_VOCATIVES`` times,
  and that the addressed speaker rarely writes themselves (a place both talk about is not a name);
  also "my name is Kate" / "call me Kate" said by the speaker.
"""

from __future__ import annotations

import functools
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

MIN_VOCATIVES = 3
# A word the addressed speaker writes this often (relative to its vocative uses) is shared vocabulary.
OWN_USE_SHARE = 0.5
_NAME = r"([A-Z][a-z]{1,20})"
_GREETING = r"(?i:hey+|hi+|hello|hiya|wow|morning|good (?:morning|night|evening)|thanks|thank you|bye|see you|congrats)"
# The word before a vocative is lowercase ("amazing Kate!"; "Golden Globes!" is a title) and is
# not one after which a capitalised word is a place or a thing ("in Houston!").
_BEFORE = r"(?<![\w'’])(?!(?:in|to|at|of|from|for|near|visit|visited|the|a|an)\b)[a-z'’]+,?"
_VOCATIVES = (
    re.compile(rf"(?:^|[.!?]\s*){_GREETING}[\s,]+{_NAME}\b"),  # "Hey Kate", "Thank you, Kate"
    re.compile(rf"{_BEFORE}\s+{_NAME}\s*(?:[!?,]|$)"),  # "... amazing Kate!", "... about you Kate?"
    re.compile(rf"^{_NAME}\s*!"),  # "Kate! You have to tell me ..."
)
_SELF = re.compile(rf"\b(?:my name is|call me)\s+{_NAME}\b", re.IGNORECASE)
# Capitalised words that end sentences or follow greetings without being anybody's name.
_NOT_NAMES = frozenset(
    """
    i im ive ill id me you my your we us our they them he she him her it its this that there here
    hey hi hello thanks thank yes yeah yep no nope ok okay oh wow haha lol omg aww cool great nice
    good well sure sorry please congrats congratulations today tomorrow tonight yesterday morning
    night evening everyone guys all too also though really lots definitely absolutely amazing
    woohoo yay yup hooray whoa woah ah hmm ugh awesome
    monday tuesday wednesday thursday friday saturday sunday january february march april may june
    july august september october november december christmas easter god lord
    """.split()
)


def configured_names(metadata_items: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """speaker id (casefolded) -> names from ``metadata["speakers"][id]`` (display_name, aliases)."""
    found: dict[str, set[str]] = defaultdict(set)
    for metadata in metadata_items:
        speakers = metadata.get("speakers") if isinstance(metadata, Mapping) else None
        if not isinstance(speakers, Mapping):
            continue
        for speaker, entry in speakers.items():
            if not isinstance(entry, Mapping):
                continue
            names = [entry.get("display_name")] + list(entry.get("aliases") or [])
            found[str(speaker).casefold()] |= {n.strip().casefold() for n in names if isinstance(n, str) and n.strip()}
    return dict(found)


@functools.lru_cache(maxsize=1 << 17)
def _words(text: str) -> tuple[tuple[str, ...], frozenset[str], frozenset[str]]:
    """A text's capitalised words, self-introduced names and vocatives (casefolded), kept per text: the
    names are learned again for every version of a group, from mostly the same messages."""
    capitalised = tuple(word.casefold() for word in re.findall(r"\b[A-Z][a-z]+\b", text))
    self_named = frozenset(name.casefold() for name in _SELF.findall(text))
    called = frozenset(name.casefold() for pattern in _VOCATIVES for name in pattern.findall(text))
    return capitalised, self_named, called


def learned_names(messages: Iterable[tuple[str, str, str]]) -> dict[str, set[str]]:
    """speaker id (casefolded) -> names learned from (speaker, addressee, text) triples in time
    order. A missing addressee is the other speaker of a two-person conversation, else the last
    other speaker."""
    triples = [(speaker.casefold(), addressee.casefold(), text) for speaker, addressee, text in messages]
    learner = NameLearner({speaker for speaker, _, _ in triples if speaker})
    learner.feed(triples)
    return learner.names()


class NameLearner:
    """``learned_names`` as a fold: fed the group's messages in time order, and fed again with the
    messages that came after them (retrieval.speaker_names), the same names as one pass over all.
    ``people``: every speaker of the group (casefolded), which decides a message's missing addressee."""

    def __init__(self, people: set[str]) -> None:
        self.people = frozenset(people)
        self.vocatives: dict[str, Counter[str]] = defaultdict(Counter)  # addressee -> name -> uses by others
        self.written: dict[str, Counter[str]] = defaultdict(Counter)  # speaker -> capitalised words written
        self.introduced: dict[str, set[str]] = defaultdict(set)
        self.speakers: set[str] = set()
        self.last, self.answered = "", ""  # the previous message's speaker; the last other speaker before it

    def copy(self) -> NameLearner:
        twin = NameLearner(set(self.people))
        twin.vocatives.update((k, Counter(v)) for k, v in self.vocatives.items())
        twin.written.update((k, Counter(v)) for k, v in self.written.items())
        twin.introduced.update((k, set(v)) for k, v in self.introduced.items())
        twin.speakers = set(self.speakers)
        twin.last, twin.answered = self.last, self.answered
        return twin

    def feed(self, triples: Iterable[tuple[str, str, str]]) -> None:
        """(speaker, addressee, text) triples, casefolded ids, in time order."""
        people, last, answered = self.people, self.last, self.answered
        for speaker, given, text in triples:
            answered = last if last and last != speaker else answered
            others = people - {speaker}
            addressee = given or (next(iter(others)) if len(others) == 1 else answered)
            last = speaker
            self.speakers |= {speaker, addressee}
            capitalised, self_named, called = _words(text)
            self.written[speaker].update(capitalised)
            self.introduced[speaker] |= self_named
            if addressee and addressee != speaker:
                self.vocatives[addressee].update(called)
        self.last, self.answered = last, answered

    def names(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = defaultdict(set)
        for addressee, counts in self.vocatives.items():
            for name, uses in counts.items():
                if uses >= MIN_VOCATIVES and self.written.get(addressee, Counter())[name] <= OWN_USE_SHARE * uses:
                    found[addressee].add(name)
        for speaker, names in self.introduced.items():
            found[speaker] |= names
        return {
            speaker: {name for name in names if name not in self.speakers and name not in _NOT_NAMES}
            for speaker, names in found.items()
            if speaker
        }


def merge_names(*sources: Mapping[str, set[str]]) -> dict[str, set[str]]:
    merged: dict[str, set[str]] = defaultdict(set)
    for source in sources:
        for speaker, names in source.items():
            merged[speaker] |= names
    return dict(merged)


def named_in(query: str, speakers: Iterable[str], names: Mapping[str, set[str]] | None = None) -> set[str]:
    """Speakers (casefolded ids) the query names, by id or by one of their other names. A name two
    speakers share names both."""
    text = query.casefold()
    found = set()
    for speaker in {s.casefold() for s in speakers if s.strip()}:
        for name in {speaker} | set((names or {}).get(speaker, ())):
            if re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text):
                found.add(speaker)
                break
    return found


def without_names(query: str, speakers: set[str], names: Mapping[str, set[str]]) -> str:
    """The query without the ids and other names of ``speakers`` (with a possessive "'s"): "What are
    Kate's hobbies?" -> "What are hobbies?". The words left are what the speaker's own messages say;
    the name itself is mostly in the messages addressed to them (the speaker bonus finds theirs). A
    query that is nothing but names is kept as it is."""
    text = query
    for name in sorted({n for s in speakers for n in {s} | set(names.get(s, ()))}, key=len, reverse=True):
        pattern = rf"(?<!\w){re.escape(name)}(['’]s)?(?!\w)"
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    stripped = " ".join(text.split())
    return stripped if re.search(r"\w", text) else query
