"""Hybrid search: vector similarity and BM25 over episodes and their messages, fused by rank.

Messages are indexed beside the episodes they belong to; a message hit counts for its episode,
so a question that matches one exact turn finds the episode that tells its story.

Group-wide search is one query on the group's index collection (the store keeps it beside the
per-session partitions), and one BM25 scoring over the group's cached keyword index: nothing on
the read path loops over sessions.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from memory.embedding.embedder import Embedder
from memory.models import Episode, Message
from memory.readmodel.snapshot import KIND_CODE, GroupSnapshot
from memory.store.protocols import LogReader, VectorReader
from memory.store.records import (
    EPISODE_KINDS,
    RecordFilter,
    RecordKind,
    VectorRecord,
    is_open_episode_id,
    message_record_id,
)
from memory.timeutil import utc_now
from memory.tracing import read_attributes, traced
from retrieval.analysis import Query, QueryAnalysis, analyse
from retrieval.candidates import Candidate, Loaded, episode_score, rrf
from retrieval.duplicates import drop_near_duplicates
from retrieval.filters import FilterMatch, RecallFilter, passing_candidates
from retrieval.keyword import KeywordCache, KeywordIndex
from retrieval.message_rows import MessageRows, message_rows
from retrieval.pending import is_pending, open_episodes
from retrieval.scope import scope_filter
from retrieval.scoring import ScoringPolicy, recency_factor, score_messages, unit
from retrieval.speaker_names import LEARNED_NAMES, GroupSpeakers, LearnedNames, group_speaker_names
from retrieval.types import Order, Scope, ScoreComponents, SearchHit, SearchQuery

# Search adds message evidence to the episodes it ranks: the messages of every candidate episode are
# the ones it scores (the same recall as scoring the whole group, at a cost bounded by the candidates;
# docs/benchmarks-recall.md). The evidence weight is chosen by leave-one-conversation-out.
SEARCH_POLICY = ScoringPolicy(select="episodes", max_episodes=100_000)
# A filter drops candidates after ranking: this many times more are ranked so that enough pass.
FILTER_DEPTH = 4


class Searcher:
    """Hybrid search over a group. Everything it reads but the vector query comes from the group's
    read snapshot (memory.readmodel.cache): episodes, message texts, vectors, the keyword index and
    the speakers' names, kept per version of the group's records (``keyword_cache_groups``: groups
    kept; the snapshot cache's byte bound applies too)."""

    def __init__(
        self, *, vectors: VectorReader, log: LogReader, embedder: Embedder, keyword_cache_groups: int = 32
    ) -> None:
        self._vectors = vectors
        self._log = log
        self._embedder = embedder
        snapshots = getattr(vectors, "snapshots", None)
        if snapshots is not None:
            snapshots.max_groups = keyword_cache_groups
        self.keywords = KeywordCache(snapshots)
        self.policy = SEARCH_POLICY

    # -- the group's read snapshot -------------------------------------------------------------------

    def snapshot(self, group_id: str, *, fresh: bool = False) -> GroupSnapshot:
        """The group's records at their current version: columns for every record (ids, documents,
        kinds, sessions, episodes, times, speakers) and, for a group within the cache's size limit
        (``snapshot.full``), every record's vector and metadata and the group's messages. ``fresh``:
        check a Chroma server's shared version now (the start of a request)."""
        return self._vectors.snapshot(group_id, fresh=fresh)

    # -- candidates ------------------------------------------------------------------------------

    def keyword_index(self, group_id: str) -> KeywordIndex:
        """The group's BM25 index; built once per version of the group's records, never per query."""
        return self.keywords.get(self.snapshot(group_id))

    def forget_group(self, group_id: str) -> None:
        self.keywords.forget(group_id)

    def speaker_names(self, group_id: str) -> dict[str, set[str]]:
        """Speaker id (casefolded) -> its other names (casefolded): set in the group's or a session's
        metadata, or learned from how the others address it (retrieval.names). Both are kept with
        the group's snapshot and read again when the group changes."""
        snapshot = self.snapshot(group_id)
        learned = snapshot.derived(LEARNED_NAMES, lambda: LearnedNames(snapshot))  # patched with the snapshot
        return snapshot.derived("speaker-names", lambda: group_speaker_names(snapshot, learned.names))

    def speakers(self, group_id: str) -> frozenset[str]:
        """The group's speakers (casefolded: a message's producer id, else its role), kept with its snapshot;
        a group too large for a full snapshot knows them by producer id."""
        snapshot = self.snapshot(group_id)
        return snapshot.derived("speakers", lambda: GroupSpeakers(snapshot)).names

    def embed_query(self, query: str) -> np.ndarray:
        embed = getattr(self._embedder, "embed_query", None)
        return embed(query) if embed is not None else self._embedder.embed_batch([query])[0]

    def embed_queries(self, queries: list[str]) -> list[np.ndarray]:
        """Several query vectors, those the embedder's cache lacks in one forward pass (and cached)."""
        embed = getattr(self._embedder, "embed_queries", None)
        return embed(queries) if embed is not None else [self.embed_query(query) for query in queries]

    @traced("epimem.search.candidates", read_attributes, lambda found: {"candidates": len(found)})
    def candidates(self, group_id: str, scope: Scope, analysis: QueryAnalysis, *, depth: int) -> list[Candidate]:
        """Records (episodes and messages) ranked by reciprocal-rank fusion of vector and BM25."""
        snapshot = self.snapshot(group_id)  # the request's caller checked the version (``fresh``) first
        if scope.filter is not None:
            depth *= FILTER_DEPTH
        query = analysis.text
        selection = scope_filter(scope, analysis.window)
        # The message evidence scored next (search, context) embeds the text without the speakers'
        # names: both in one forward pass, the second left in the query cache (a second pass without it).
        texts = [query] if analysis.match_text == query else [query, analysis.match_text]
        hits = self._vectors.nearest(group_id, self.embed_queries(texts)[0], k=depth, selection=selection)
        vector_rank: dict[str, int] = {}
        records: dict[str, VectorRecord] = {}
        similarity: dict[str, float] = {}
        for rank, (record_id, distance) in enumerate(hits):
            record = snapshot.record_by_id(record_id)
            if record is None:  # written after this request's snapshot: not part of what it sees
                continue
            vector_rank[record_id] = rank
            records[record_id] = record
            similarity[record_id] = 1.0 - distance

        keyword_rank: dict[str, int] = {}
        keyword_score: dict[str, float] = {}
        top = self.keywords.get(snapshot).top(
            query,
            depth=depth,
            session_ids=scope.session_ids,
            start=selection.since,
            end=selection.before,
        )
        for rank, (record, score) in enumerate(top):
            keyword_rank[record.id] = rank
            keyword_score[record.id] = score
            records.setdefault(record.id, record)

        candidates = [
            Candidate(
                record=record,
                vector=similarity.get(record_id, 0.0),
                keyword=keyword_score.get(record_id, 0.0),
                fused=rrf(vector_rank.get(record_id)) + rrf(keyword_rank.get(record_id)),
                vector_rank=vector_rank.get(record_id),
                keyword_rank=keyword_rank.get(record_id),
            )
            for record_id, record in records.items()
        ]
        candidates.sort(key=lambda candidate: (-candidate.fused, candidate.record_id))
        if scope.filter is not None:
            candidates = passing_candidates(self, group_id, self.filter_match(group_id, scope.filter), candidates)
        return candidates

    # -- filters (retrieval.filters) -------------------------------------------------------------------

    def filter_match(self, group_id: str, wanted: RecallFilter) -> FilterMatch:
        return FilterMatch(wanted, self.speaker_names(group_id))

    # -- search ------------------------------------------------------------------------------------

    @traced("epimem.search", read_attributes, lambda hits: {"hits": len(hits)})
    def search(self, group_id: str, query: SearchQuery) -> list[SearchHit]:
        self.snapshot(group_id, fresh=True)  # what this request reads: another server's writes included
        analysis = self.analyse(group_id, query, self.policy)
        depth = max(50, query.k * 8)
        candidates = self.candidates(group_id, query, analysis, depth=depth)
        by_episode: dict[str, list[Candidate]] = defaultdict(list)
        for candidate in candidates:
            by_episode[candidate.episode_id].append(candidate)
        episodes, vectors = self.load_episodes_with_vectors(group_id, list(by_episode))
        evidence = self.message_evidence(group_id, candidates, query, analysis, Loaded(episodes, vectors))
        now = query.reference_time or utc_now()
        hits: list[SearchHit] = []
        for episode_id, items in by_episode.items():
            episode = episodes.get(episode_id)
            if episode is None:
                continue
            fused = episode_score(items)
            sources = episode.source_episode_ids or (episode_id,)
            best = max((evidence[e] for e in sources if e in evidence), default=0.0)
            recency = recency_factor(episode.timestamp, now, query.recency_weight, query.recency_half_life_days)
            hits.append(
                SearchHit(
                    episode=episode,
                    score=(fused + self.policy.search_evidence * best) * recency,
                    components=ScoreComponents(
                        vector=max(item.vector for item in items),
                        keyword=max(item.keyword for item in items),
                        fused=fused,
                        recency=recency,
                    ),
                    matched_message_ids=[item.record.message_id for item in items if item.is_message],
                    pending=is_pending(episode),
                )
            )
        hits.sort(key=lambda hit: (-hit.score, hit.episode.uuid))
        if query.dedupe:
            hits = drop_near_duplicates(hits, vectors, limit=query.k)
        hits = hits[: query.k]
        if query.order is Order.CHRONOLOGICAL:
            hits.sort(key=lambda hit: (hit.episode.timestamp, hit.episode.uuid))
        if query.expand:
            match = self.filter_match(group_id, query.filter) if query.filter is not None else None
            for position, hit in enumerate(hits):
                found = [
                    m
                    for m in self.source_messages(group_id, hit.episode)
                    if match is None or match.message(m, hit.episode)
                ]
                hits[position] = hit.model_copy(update={"messages": found})
        return hits

    def analyse(self, group_id: str, query: Query, policy: ScoringPolicy) -> QueryAnalysis:
        """The query understood once for this request (retrieval.analysis), against the group's speakers
        and their other names."""
        return analyse(
            query,
            speakers=self.speakers(group_id),
            names=self.speaker_names(group_id),
            names_to_ids=policy.names_to_ids,
            other_names=policy.other_names,
            strip_names=policy.strip_names,
            first_person=policy.first_person,
        )

    def message_evidence(
        self,
        group_id: str,
        candidates: list[Candidate],
        query: SearchQuery,
        analysis: QueryAnalysis,
        loaded: Loaded | None = None,
    ) -> dict[str, float]:
        """Episode id -> the best message score of the episode (retrieval.scoring: the speakers and
        times the query names, the message's own match, its neighbours'), for the best episodes.
        ``loaded``: the candidates' episodes and vectors this request already read."""
        if self.policy.search_evidence <= 0:
            return {}
        plain = query.model_copy(update={"recency_weight": 0.0})  # recency is applied per episode
        scored = score_messages(self, group_id, candidates, plain, analysis, self.policy, loaded)
        return {item.episode.uuid: max(item.scores) for item in scored if item.scores}

    def open_episodes(self, group_id: str) -> dict[str, Episode]:
        """Each session's pending messages as its open episode (retrieval.pending), by id; kept with
        the group's snapshot."""
        snapshot = self.snapshot(group_id)
        return snapshot.derived("open-episodes", lambda: open_episodes(snapshot, self._log))

    def _split_open(self, group_id: str, episode_ids: list[str]) -> tuple[dict[str, Episode], list[str]]:
        """The open episodes among ``episode_ids``, and the other ids."""
        if not any(is_open_episode_id(e) for e in episode_ids):
            return {}, episode_ids
        found = self.open_episodes(group_id)
        return {e: found[e] for e in episode_ids if e in found}, [e for e in episode_ids if not is_open_episode_id(e)]

    def load_episodes_with_vectors(
        self, group_id: str, episode_ids: list[str]
    ) -> tuple[dict[str, Episode], dict[str, np.ndarray]]:
        """Episodes (and summaries, and open episodes, which have no vector) by id with their vectors
        (a full snapshot's unit vectors), in one read."""
        opened, episode_ids = self._split_open(group_id, episode_ids)
        if not episode_ids:
            return opened, {}
        snapshot = self.snapshot(group_id)
        if snapshot.full:
            episodes = {e: found for e in episode_ids if (found := snapshot.episode(e)) is not None}
            vectors = {e: vector for e in episodes if (vector := snapshot.direction(e)) is not None}
            return opened | episodes, vectors
        if snapshot.directions is not None:  # past the full bound, its vectors kept: the episodes read alone
            episodes = self._kept_or_read(snapshot, episode_ids)
            vectors = {e: vector for e in episodes if (vector := snapshot.direction(e)) is not None}
            return opened | episodes, vectors
        records = self._vectors.records(group_id, ids=episode_ids, embeddings=True)
        records = [record for record in records if record.is_episode]
        episodes = {record.id: record.episode() for record in records}
        return opened | episodes, {record.id: record.embedding for record in records if record.embedding is not None}

    def load_episodes(self, group_id: str, episode_ids: list[str]) -> dict[str, Episode]:
        opened, episode_ids = self._split_open(group_id, episode_ids)
        if not episode_ids:
            return opened
        snapshot = self.snapshot(group_id)
        if snapshot.full:
            return opened | {e: found for e in episode_ids if (found := snapshot.episode(e)) is not None}
        return opened | self._kept_or_read(snapshot, episode_ids)

    def _kept_or_read(self, snapshot: GroupSnapshot, episode_ids: list[str]) -> dict[str, Episode]:
        """Episodes by id for a snapshot without their metadata: those it keeps parsed, the others read
        from Chroma (and kept)."""
        episodes = {e: found for e in episode_ids if (found := snapshot.episode(e)) is not None}
        missing = [e for e in episode_ids if e not in episodes]
        read = self._vectors.episodes(snapshot.group_id, ids=missing) if missing else []
        snapshot.keep_parsed(read)
        return episodes | {e.uuid: e for e in read if e.uuid in missing}

    def episode(self, group_id: str, session_id: str, episode_id: str) -> Episode | None:
        """An episode or summary of one session by id (or the session's open episode by its id)."""
        if is_open_episode_id(episode_id):
            opened = self.open_episodes(group_id).get(episode_id)
            return opened if opened is not None and opened.session_id == session_id else None
        selection = RecordFilter(session_ids=(session_id,), kinds=EPISODE_KINDS)
        found = self._vectors.episodes(group_id, ids=[episode_id], selection=selection)
        return found[0] if found else None

    def source_messages(self, group_id: str, episode: Episode) -> list[Message]:
        if episode.source_episode_ids:  # a summary: its messages are those of the episodes it compacts
            sources = self.load_episodes(group_id, list(episode.source_episode_ids)).values()
            found = [
                m for source in sources if not source.source_episode_ids for m in self.source_messages(group_id, source)
            ]
            return sorted(found, key=lambda message: message.timestamp)
        return self.messages_of(group_id, [episode]).get(episode.uuid, [])

    def group_rows(self, group_id: str, *, fresh: bool = False) -> MessageRows | None:
        """Every episode's messages as scoring rows (retrieval.message_rows), kept with the group's
        snapshot; None for a group too large for a full snapshot. ``fresh``: as for ``snapshot``."""
        snapshot = self.snapshot(group_id, fresh=fresh)
        if not snapshot.full or snapshot.directions is None:
            return None
        code = KIND_CODE[RecordKind.EPISODE.value]
        ids = [snapshot.ids[p] for p in np.flatnonzero(snapshot.kinds == code)]
        ids += sorted(self.open_episodes(group_id))  # before ``derived``: its lock is held while it builds
        return snapshot.derived("message-rows", lambda: self.episode_rows(group_id, ids), lambda rows: rows.nbytes)

    def episode_rows(self, group_id: str, episode_ids: list[str], loaded: Loaded | None = None) -> MessageRows:
        """The messages of those episodes (not summaries) as scoring rows, with their vectors (those in
        ``loaded`` are not read again)."""
        known = loaded or Loaded({}, {})
        found = {e: known.episodes[e] for e in episode_ids if e in known.episodes}
        missing = [e for e in episode_ids if e not in found]
        found |= self.load_episodes(group_id, missing)
        episodes = [
            e
            for e in (found[i] for i in episode_ids if i in found)
            if e.episode_type.value in EPISODE_KINDS and not e.source_episode_ids
        ]
        messages = self.messages_of(group_id, episodes)
        snapshot = self.snapshot(group_id)
        if snapshot.full and snapshot.directions is not None:
            return message_rows(episodes, messages, snapshot.directions, snapshot.positions, snapshot.positions)
        if snapshot.directions is not None:  # past the full bound, its vectors kept: those rows, gathered
            ids = [e.uuid for e in episodes] + [
                message_record_id(e.session_id, m.id) for e in episodes for m in messages.get(e.uuid, [])
            ]
            present = [(i, p) for i in ids if (p := snapshot.positions.get(i)) is not None]
            matrix = snapshot.directions[[p for _, p in present]]
            vector_rows = {record_id: row for row, (record_id, _) in enumerate(present)}
            return message_rows(episodes, messages, matrix, vector_rows, snapshot.positions)
        ids = [e.uuid for e in episodes if e.uuid not in known.vectors] + [
            message_record_id(e.session_id, m.id) for e in episodes for m in messages.get(e.uuid, [])
        ]
        stored = {e.uuid: known.vectors[e.uuid] for e in episodes if e.uuid in known.vectors}
        stored |= self._vectors.embeddings(group_id, ids)
        vectors = {record_id: unit(vector) for record_id, vector in stored.items()}
        matrix = np.stack(list(vectors.values())) if vectors else np.zeros((0, 0), dtype=np.float32)
        vector_rows = {record_id: row for row, record_id in enumerate(vectors)}
        return message_rows(episodes, messages, matrix, vector_rows, snapshot.positions)

    def keyword_scores(self, group_id: str, query: str) -> tuple[KeywordIndex, np.ndarray]:
        index = self.keyword_index(group_id)
        return index, index.scores(query)

    def messages_of(self, group_id: str, episodes: list[Episode]) -> dict[str, list[Message]]:
        """Source messages of many episodes (from the group's snapshot, else one log read),
        each list in event-time order."""
        snapshot = self.snapshot(group_id) if episodes else None
        if snapshot is not None and snapshot.messages is not None:
            kept = snapshot.messages
            return {
                episode.uuid: sorted(
                    (
                        message
                        for i in episode.source_message_ids
                        if (message := kept.get(message_record_id(episode.session_id, i))) is not None
                    ),
                    key=lambda message: message.timestamp,
                )
                for episode in episodes
            }
        wanted: dict[str, list[str]] = defaultdict(list)
        for episode in episodes:
            wanted[episode.session_id] += episode.source_message_ids
        stored = self._log.get_messages_of_sessions(group_id, wanted)
        found: dict[str, list[Message]] = {}
        for episode in episodes:
            by_id = stored.get(episode.session_id, {})
            messages = [by_id[i].message for i in episode.source_message_ids if i in by_id]
            found[episode.uuid] = sorted(messages, key=lambda message: message.timestamp)
        return found
