"""Any Chroma deployment by settings: a real `chroma run` behind a token-checking proxy (a process, as deployments
put one in front; Chroma Cloud checks the same header), with a tenant and a database of epimem's own. The
tenant and database are created at start where they are missing; a missing or wrong token, a tenant or
database that may not be created, stop the start with an error that names the cause (``epimem serve``: one
line); a token revoked while serving answers 503, not 500. (Every server-backend test of the suite also runs
through such a proxy: tests/conftest.py.)"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chromadb
import pytest
from chromadb.config import Settings as ChromaSettings
from helpers.builders import T0, chat
from helpers.processes import epimem
from helpers.servers import ChromaServer, free_port
from helpers.token_proxy import TokenProxy

from api.facade import Epimem
from api.settings import Settings
from memory.errors import StoreUnavailableError
from memory.store import codec

pytestmark = pytest.mark.slow  # processes

TOKEN = "tok-right-one"


@pytest.fixture
def proxy(chroma_server: ChromaServer, tmp_path: Path) -> Iterator[TokenProxy]:
    found = TokenProxy(f"http://127.0.0.1:{chroma_server.port}", TOKEN, log=tmp_path / "proxy.log").start()
    yield found
    found.stop()


def fresh(**values: Any) -> dict[str, Any]:
    """Settings of a tenant and database nobody used yet."""
    return {"chroma_tenant": f"t-{uuid.uuid4().hex[:10]}", "chroma_database": f"d-{uuid.uuid4().hex[:10]}", **values}


def service_on(proxy: TokenProxy, tmp_path: Path, embedder: Any, **values: Any) -> Epimem:
    settings = Settings(data_dir=tmp_path / "data", chroma_host="127.0.0.1", chroma_port=proxy.port, **values)
    return Epimem.from_settings(settings, embedder=embedder, background=False)


def collections_of(port: int, tenant: str = "default_tenant", database: str = "default_database") -> set[str]:
    """The collection names of a tenant's database, read straight from the Chroma server."""
    client = chromadb.HttpClient(
        host="127.0.0.1",
        port=port,
        settings=ChromaSettings(anonymized_telemetry=False),
        tenant=tenant,
        database=database,
    )
    return {c.name for c in client.list_collections()}


def test_a_new_tenant_and_database_are_made_and_hold_the_memory(
    proxy: TokenProxy, chroma_server: ChromaServer, tmp_path: Path, embedder: Any
) -> None:
    values = fresh(chroma_token=TOKEN)
    service = service_on(proxy, tmp_path, embedder, **values)
    try:
        service.add_messages("g", "s", chat("m", 4, start=T0))
        episodes = {episode.uuid for episode in service.flush("g", "s")}
        hits = {hit.episode.uuid for hit in service.search("g", "Caroline", k=3)}
        assert hits and hits <= episodes
    finally:
        service.close()
    mine = collections_of(chroma_server.port, values["chroma_tenant"], values["chroma_database"])
    assert {codec.log_name("g"), codec.index_name("g"), codec.partition_name("g", "s")} <= mine
    assert codec.log_name("g") not in collections_of(chroma_server.port)  # not in the default database
    again = service_on(proxy, tmp_path, embedder, **values)  # a second start finds them
    try:
        assert [m.id for m in again.history("g", "s")] == [f"m-{i}" for i in range(4)]
    finally:
        again.close()


def test_a_missing_or_wrong_token_stops_the_start_naming_it(proxy: TokenProxy, tmp_path: Path, embedder: Any) -> None:
    before = proxy.counts()
    with pytest.raises(StoreUnavailableError) as missing:
        service_on(proxy, tmp_path, embedder, **fresh())
    assert "refused a request without a token" in missing.value.message
    assert "EPIMEM_CHROMA_TOKEN" in missing.value.message
    with pytest.raises(StoreUnavailableError) as wrong:
        service_on(proxy, tmp_path, embedder, **fresh(chroma_token="tok-wrong"))
    assert "refused the token in x-chroma-token" in wrong.value.message
    after = proxy.counts()
    assert after["forwarded"] == before["forwarded"] and after["refused"] > before["refused"]


def test_the_token_header_is_a_setting(chroma_server: ChromaServer, tmp_path: Path, embedder: Any) -> None:
    proxy = TokenProxy(f"http://127.0.0.1:{chroma_server.port}", TOKEN, header="x-api-key").start()
    try:
        with pytest.raises(StoreUnavailableError, match="refused the token in x-chroma-token"):
            service_on(proxy, tmp_path, embedder, **fresh(chroma_token=TOKEN))
        service = service_on(proxy, tmp_path, embedder, **fresh(chroma_token=TOKEN, chroma_token_header="x-api-key"))
        service.add_messages("g", "s", chat("m", 2, start=T0))
        assert len(service.history("g", "s")) == 2
        service.close()
    finally:
        proxy.stop()


def test_a_tenant_or_database_that_may_not_be_made_is_named(
    chroma_server: ChromaServer, tmp_path: Path, embedder: Any
) -> None:
    proxy = TokenProxy(f"http://127.0.0.1:{chroma_server.port}", TOKEN, no_create=True).start()
    try:
        values = fresh(chroma_token=TOKEN)
        with pytest.raises(StoreUnavailableError) as error:
            service_on(proxy, tmp_path, embedder, **values)
        assert f"tenant {values['chroma_tenant']!r} does not exist" in error.value.message
        assert "EPIMEM_CHROMA_TENANT" in error.value.message
        database = f"d-{uuid.uuid4().hex[:10]}"
        with pytest.raises(StoreUnavailableError) as error:
            service_on(proxy, tmp_path, embedder, chroma_token=TOKEN, chroma_database=database)
        assert f"database {database!r} of tenant 'default_tenant' does not exist" in error.value.message
        # existing ones need no creation
        service = service_on(proxy, tmp_path, embedder, chroma_token=TOKEN)
        service.close()
    finally:
        proxy.stop()


def test_serve_with_a_refused_token_says_so_in_one_line(proxy: TokenProxy, tmp_path: Path) -> None:
    result = epimem(
        "serve",
        "--data-dir",
        str(tmp_path / "data"),
        "--port",
        str(free_port()),
        EPIMEM_CHROMA_HOST="127.0.0.1",
        EPIMEM_CHROMA_PORT=str(proxy.port),
        EPIMEM_CHROMA_TOKEN="tok-wrong",
    )
    errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(errors) == 1 and "refused the token in x-chroma-token" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_a_token_revoked_while_serving_answers_503(proxy: TokenProxy, tmp_path: Path, embedder: Any) -> None:
    service = service_on(proxy, tmp_path, embedder, **fresh(chroma_token=TOKEN))
    try:
        service.add_messages("g", "s", chat("m", 2, start=T0))
        proxy.revoke("tok-next")
        with pytest.raises(StoreUnavailableError) as error:
            service.add_messages("g", "s", chat("n", 2, start=T0))
        assert error.value.status_code == 503 and "refused epimem's token" in error.value.message
        proxy.revoke(TOKEN)
        service.add_messages("g", "s", chat("n", 2, start=T0))
        assert len(service.history("g", "s")) == 4
    finally:
        service.close()
