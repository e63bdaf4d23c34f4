"""``epimem retention …`` and ``epimem webhooks …`` on a running epimem (a real uvicorn server on either backend,
``--url`` / ``EPIMEM_URL`` and ``--key`` / ``EPIMEM_API_KEY``, through the thin client's methods), who may do what,
errors as one line; the same methods on ``AsyncEpimemClient``; and the commands still in process on a data
folder."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.builders import T0, chat, two_episode_session
from helpers.servers import AppServer
from typer.testing import CliRunner

from api.cli.main import app
from api.facade import Epimem
from api.settings import Settings
from epimem_client import AsyncEpimemClient
from epimem_client.cli.app import app as thin_app
from memory.embedding.embedder import SentenceTransformerEmbedder

runner = CliRunner()
ROOT = "root-operations-0123456789ab"
GROUP_ADMIN = "group-admin-0123456789abcd"
READER = "reader-operations-012345678"
SECRET = "whsec-0123456789abcdef"


def cli(*args: str, target: Any = app, **env: str) -> tuple[int, str, str]:
    result = runner.invoke(target, list(args), env={"EPIMEM_URL": None, "EPIMEM_API_KEY": None, **env})
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def running(
    settings_for: Callable[..., Settings],
    embedder: SentenceTransformerEmbedder,
    serve: Callable[..., AppServer],
    group_id: str,
    tmp_path: Path,
) -> Any:
    keys = [
        {"key": ROOT, "groups": ["*"], "role": "admin", "name": "root"},
        {"key": GROUP_ADMIN, "groups": [group_id], "role": "admin", "name": "ops"},
        {"key": READER, "groups": [group_id], "role": "read"},
    ]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": keys}))
    settings = settings_for(api_keys_file=tmp_path / "keys.json", webhook_allow_hosts="127.0.0.1")
    service = Epimem.from_settings(settings, background=False, embedder=embedder)
    two_episode_session(service, group_id, "s1", day=0)
    service.add_messages(group_id, "s2", chat("s2", 2, start=T0))
    try:
        yield serve(service, settings=settings), service
    finally:
        service.close()


@pytest.mark.slow
def test_retention_from_the_command_line_on_a_running_epimem(running: Any, group_id: str) -> None:
    server, service = running
    remote = ("--url", server.url, "--key", GROUP_ADMIN)
    code, out, err = cli("retention", "set", group_id, "--max-age-days", "30", *remote, "--json")
    assert code == 0, err
    assert json.loads(out)["by"] == "timestamp" and json.loads(out)["max_age_days"] == 30
    code, _, err = cli("retention", "set", group_id, "--max-age-days", "36000", "--session", "s2", *remote)
    assert code == 0, err
    code, out, _ = cli("retention", "show", group_id, "--json", EPIMEM_URL=server.url, EPIMEM_API_KEY=READER)
    shown = json.loads(out)
    assert code == 0 and shown["group"]["max_age_days"] == 30 and [p["session_id"] for p in shown["sessions"]] == ["s2"]
    code, table, _ = cli("retention", "show", group_id, "--url", server.url, "--key", READER)
    assert code == 0 and "session s2" in table and "timestamp" in table

    code, _, err = cli("retention", "sweep", group_id, "--url", server.url, "--key", READER)
    assert code == 1 and err.startswith("error (forbidden):") and len(err.strip().splitlines()) == 1
    code, out, _ = cli("retention", "sweep", group_id, "--dry-run", *remote, "--json")
    preview = json.loads(out)
    assert code == 0 and preview["dry_run"] is True
    assert sorted(preview["messages"]) == ["s1-a-0", "s1-a-1", "s1-b-0", "s1-b-1"]  # s2 keeps its own policy
    assert len(service.history(group_id, "s1")) == 4  # nothing changed
    code, out, _ = cli("retention", "sweep", group_id, EPIMEM_URL=server.url, EPIMEM_API_KEY=GROUP_ADMIN)
    assert code == 0 and "erased: 1 sessions, 4 messages, 2 episodes" in " ".join(out.split())
    assert service.history(group_id, "s1") == [] and len(service.history(group_id, "s2")) == 2
    (entry,) = [e for e in service.audit(group_id).entries if e.action.value == "retention_sweep"]
    assert entry.actor == "ops" and sorted(entry.ids["messages"]) == sorted(preview["messages"])

    code, out, _ = cli("retention", "clear", group_id, "--session", "s2", *remote)
    assert code == 0 and "cleared" in out
    code, out, _ = cli("retention", "clear", group_id, "--session", "s2", *remote, target=thin_app)
    assert code == 0 and "there was no policy" in out  # the thin client's own epimem too
    code, _, err = cli("retention", "show", "nobody", "--url", server.url, "--key", ROOT)
    assert code == 1 and err.startswith("error (not_found):")

    async def read_async() -> tuple[Any, Any]:
        async with AsyncEpimemClient(server.url, api_key=ROOT) as client:
            return await client.retention(group_id), await client.sweep_retention(group_id, dry_run=True)

    policies, receipt = asyncio.run(read_async())
    assert policies.group is not None and policies.group.max_age_days == 30 and policies.sessions == []
    assert receipt.dry_run and sorted(receipt.messages) == ["s2-0", "s2-1"]  # the group's policy covers s2 now


@pytest.mark.slow
def test_webhooks_from_the_command_line_on_a_running_epimem(running: Any, group_id: str) -> None:
    server, _ = running
    root = ("--url", server.url, "--key", ROOT)
    hook = "http://127.0.0.1:9/hook"
    code, _, err = cli(
        "webhooks", "create", hook, "--secret", SECRET, "-g", group_id, "--url", server.url, "--key", GROUP_ADMIN
    )
    assert code == 1 and err.startswith("error (forbidden):")  # an admin of every group only
    code, _, err = cli("webhooks", "create", "http://10.1.2.3/hook", "--secret", SECRET, "-g", group_id, *root)
    assert code == 1 and "EPIMEM_WEBHOOK_ALLOW_HOSTS" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli(
        "webhooks", "create", hook, "--secret", SECRET, "-g", group_id, "--description", "crm", *root, "--json"
    )
    assert code == 0, err
    made = json.loads(out)
    assert made["url"] == hook and made["groups"] == [group_id] and made["created_by"] == "root"
    assert SECRET not in out and "secret" not in made

    code, out, _ = cli("webhooks", "list", "--json", EPIMEM_URL=server.url, EPIMEM_API_KEY=ROOT)
    assert code == 0 and made["id"] in [w["id"] for w in json.loads(out)] and SECRET not in out  # a shared server
    code, table, _ = cli("webhooks", "list", *root, COLUMNS="200")
    assert code == 0 and "webhooks" in table  # the table renders (its cells wrap at the terminal's width)
    code, out, _ = cli("webhooks", "deliveries", made["id"], "--limit", "5", *root, "--json")
    log = json.loads(out)
    assert code == 0 and log["subscription"]["id"] == made["id"] and log["attempts"] == []

    async def listed() -> list[str]:
        async with AsyncEpimemClient(server.url, api_key=ROOT) as client:
            return [w.id for w in await client.webhook_subscriptions()]

    assert made["id"] in asyncio.run(listed())
    code, out, _ = cli("webhooks", "delete", made["id"], *root)
    assert code == 0 and "removed" in out
    code, _, err = cli("webhooks", "deliveries", made["id"], *root)
    assert code == 1 and err.startswith("error (not_found):")


def test_the_commands_still_work_in_process_on_a_data_folder(tmp_path: Path, embedder: Any) -> None:
    folder = str(tmp_path / "data")
    env = {"EPIMEM_WEBHOOK_ALLOW_HOSTS": "127.0.0.1"}

    def local(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(
            app, [*args, "--data-dir", folder], env={"EPIMEM_URL": None, **env}, obj={"embedder": embedder}
        )
        return result.exit_code, result.stdout, result.stderr

    code, _, err = local("retention", "set", "g1", "--max-age-days", "7", "--by", "arrival")
    assert code == 0, err
    code, out, _ = local("retention", "show", "g1", "--json")
    assert code == 0 and json.loads(out)["group"]["by"] == "arrival"
    code, out, _ = local("retention", "sweep", "g1", "--json")
    assert code == 0 and json.loads(out)["counts"]["messages"] == 0
    code, out, err = local("webhooks", "create", "http://127.0.0.1:9/x", "--secret", SECRET, "-g", "*", "--json")
    assert code == 0 and json.loads(out)["created_by"] == "local", err
    code, out, _ = local("webhooks", "list", "--json")
    assert code == 0 and len(json.loads(out)) == 1 and SECRET not in out
