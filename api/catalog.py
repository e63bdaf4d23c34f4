"""Every operation of epimem, declared once, with its name on each surface: the HTTP route(s), the in-process
facade (``api.facade.Epimem``), the Python clients (``EpimemClient`` and ``AsyncEpimemClient``, the same names; keys
and limits on ``epimem_client.keys.KeyAdmin``), the TypeScript client, the MCP tool and the command.

``tests/api/test_catalog.py`` reads every surface as it is (the app's routes, the MCP server's tools, the clients'
methods, the TypeScript client's source, the command tree, the facade's methods) and compares it with this table
both ways: an operation added to one surface and forgotten on another, or a surface that grew an operation the
table does not name, fails it. ``None`` (or no route) says the surface does not offer it, on purpose."""

from __future__ import annotations

from dataclasses import dataclass

MESSAGES = "/v1/groups/{group_id}/sessions/{session_id}/messages"
EPISODE = "/v1/groups/{group_id}/sessions/{session_id}/episodes/{episode_id}"
SESSION = "/v1/groups/{group_id}/sessions/{session_id}"
GROUP = "/v1/groups/{group_id}"


@dataclass(frozen=True)
class Operation:
    name: str
    http: tuple[str, ...] = ()  # "METHOD /path", as the app routes it
    facade: str | None = None
    python: str | None = None  # a method of both Python clients; "KeyAdmin.<method>" for keys and limits
    typescript: str | None = None
    mcp: str | None = None
    cli: str | None = None  # the command, with its group: "keys create"


def _same(
    name: str, *http: str, typescript: str | None = None, mcp: str | None = None, cli: str | None = None
) -> Operation:
    """An operation with the same name in the facade and the Python clients."""
    return Operation(name, http, facade=name, python=name, typescript=typescript, mcp=mcp, cli=cli)


OPERATIONS: tuple[Operation, ...] = (
    # -- messages and episodes
    _same("add_messages", f"POST {MESSAGES}", typescript="addMessages", mcp="add_messages"),
    _same("history", f"GET {MESSAGES}", typescript="history"),
    _same("get_message", f"GET {MESSAGES}/{{message_id}}", typescript="getMessage", mcp="get_message"),
    _same("flush", f"POST {SESSION}/flush", typescript="flush"),
    _same("delete_message", f"DELETE {MESSAGES}/{{message_id}}", typescript="deleteMessage"),
    _same("redact_message", f"POST {MESSAGES}/{{message_id}}/redact", cli="redact"),
    _same("get_episode", f"GET {EPISODE}", typescript="getEpisode", mcp="get_episode"),
    _same("episode_messages", f"GET {EPISODE}"),  # the same route, ?expand=messages
    _same("delete_episode", f"DELETE {EPISODE}", typescript="deleteEpisode"),
    _same("correct_episode", f"PATCH {EPISODE}", mcp="correct_episode", cli="correct"),
    _same("episode_revisions", f"GET {EPISODE}/revisions", cli="revisions"),
    _same("audit", f"GET {GROUP}/audit", cli="audit"),
    # -- recall
    _same("search", f"POST {GROUP}/search", typescript="search", mcp="search_memory", cli="search"),
    _same("context", f"POST {GROUP}/context", typescript="context", mcp="get_context", cli="context"),
    _same("timeline", f"GET {GROUP}/timeline", typescript="timeline", mcp="get_timeline", cli="timeline"),
    Operation("timeline_histogram", (f"GET {GROUP}/timeline/histogram",), facade="timeline_histogram"),
    # -- groups and sessions
    Operation("list_groups", ("GET /v1/groups",), facade="list_groups", python="list_groups"),
    _same("put_group", f"PUT {GROUP}", typescript="putGroup"),
    _same("get_group", f"GET {GROUP}", typescript="getGroup"),
    _same("group_exists", f"GET {GROUP}"),  # the client asks for the group's configuration
    _same("delete_group", f"DELETE {GROUP}", typescript="deleteGroup"),
    Operation("group_overview", (f"GET {GROUP}/overview",), facade="group_overview"),
    _same("group_stats", f"GET {GROUP}/overview", cli="stats"),
    _same("list_sessions", f"GET {GROUP}/sessions", typescript="listSessions", mcp="list_sessions"),
    _same("put_session", f"PUT {SESSION}", typescript="putSession"),
    _same("get_session", f"GET {SESSION}", typescript="getSession"),
    _same("delete_session", f"DELETE {SESSION}", typescript="deleteSession", mcp="delete_session"),
    Operation("whoami", ("GET /v1/auth/whoami",)),
    # -- lifecycle
    _same("generate_summaries", f"POST {GROUP}/summaries", typescript="generateSummaries"),
    _same("export_group", f"GET {GROUP}/export", typescript="exportGroup", cli="export"),
    _same("import_group", f"POST {GROUP}/import", typescript="importGroup", cli="import"),
    Operation("reembed", facade="reembed", cli="reembed"),
    Operation("backup", ("GET /v1/backup",), facade="backup", cli="backup"),
    Operation("restore", ("POST /v1/restore",), facade="restore", cli="restore"),
    # -- running for many tenants: retention and change events
    _same("set_retention", f"PUT {GROUP}/retention", f"PUT {SESSION}/retention", cli="retention set"),
    _same("clear_retention", f"DELETE {GROUP}/retention", f"DELETE {SESSION}/retention", cli="retention clear"),
    _same("retention", f"GET {GROUP}/retention", cli="retention show"),
    _same("sweep_retention", f"POST {GROUP}/retention/sweep", cli="retention sweep"),
    _same("create_webhook", "POST /v1/webhooks", cli="webhooks create"),
    _same("webhook_subscriptions", "GET /v1/webhooks", cli="webhooks list"),
    _same("delete_webhook", "DELETE /v1/webhooks/{subscription_id}", cli="webhooks delete"),
    _same("webhook_deliveries", "GET /v1/webhooks/{subscription_id}/deliveries", cli="webhooks deliveries"),
    # -- keys and limits (the server's key store: no facade method)
    Operation("create_key", ("POST /v1/keys",), python="KeyAdmin.create", cli="keys create"),
    Operation("list_keys", ("GET /v1/keys",), python="KeyAdmin.list", cli="keys list"),
    Operation("get_key", ("GET /v1/keys/{key_id}",)),
    Operation("revoke_key", ("DELETE /v1/keys/{key_id}",), python="KeyAdmin.revoke", cli="keys revoke"),
    Operation("rotate_key", ("POST /v1/keys/{key_id}/rotate",), python="KeyAdmin.rotate", cli="keys rotate"),
    Operation("key_limits", ("PUT /v1/keys/{key_id}/limits",), python="KeyAdmin.set_limits", cli="keys limits"),
    Operation("group_limits", (f"PUT {GROUP}/limits",), python="KeyAdmin.set_group_limits", cli="keys group-limits"),
    Operation("group_usage", (f"GET {GROUP}/usage",), python="KeyAdmin.group_usage", cli="keys usage"),
    Operation("usage", ("GET /v1/usage",), python="KeyAdmin.usage", cli="keys usage"),
    # -- the server itself
    Operation("home", ("GET /",)),
    Operation("healthz", ("GET /healthz",)),
    Operation("ready", ("GET /readyz",), facade="heartbeat", python="ready", typescript="ready"),
    Operation("metrics", ("GET /metrics",), facade="stats"),
    Operation("generator_stats", facade="generator_stats"),
    Operation("serve", cli="serve"),
    Operation("mcp", cli="mcp"),
    Operation("segment", cli="segment"),
    Operation("erase_residue", cli="erase-residue"),
    # -- in process only
    Operation("flush_group", facade="flush_group"),
    Operation("ingest_locomo", facade="ingest_locomo"),
    Operation("pending_messages", facade="pending_messages"),
    Operation("summary_sources", facade="summary_sources"),
    Operation("vector_count", facade="vector_count"),
    Operation("wait_idle", facade="wait_idle"),
    Operation("recover", facade="recover"),
)

# What every surface has that is not an operation: making and closing it.
NOT_OPERATIONS = {"facade": {"from_settings", "close"}, "python": {"close", "aclose"}}
