"""``epimem backup`` and ``epimem restore``: a server (or one group) in one file while it serves, and back
into an empty data folder or another server (memory.upkeep, memory.lifecycle.backup).

With ``--url`` they talk to a running epimem (``GET /v1/backup``, ``POST /v1/restore``; an admin key for
every group from ``--key`` or ``EPIMEM_API_KEY``); otherwise they work in process on the data folder
(``epimem backup`` then needs the folder free: stop its server, or back it up over HTTP).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import httpx
import typer

from api.cli.common import AsJson, DataDir, fail, open_service, out, print_json

Url = Annotated[str | None, typer.Option("--url", help="a running epimem, e.g. http://localhost:8000")]
Key = Annotated[
    str | None,
    typer.Option("--key", envvar="EPIMEM_API_KEY", help="an admin key for every group ('*')", show_default=False),
]
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


def _headers(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _refusal(response: httpx.Response) -> None:
    """Fail with the server's own error line."""
    try:
        error = response.json()["error"]
        fail(error["message"], 1, code=error["code"])
    except (ValueError, KeyError, TypeError):
        fail(f"the server answered {response.status_code}", 1)


def backup(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="the backup file to write (gzip)")],
    url: Url = None,
    key: Key = None,
    group: Annotated[str | None, typer.Option("--group", "-g", help="only this group")] = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Back up a whole server (or one group) into one file while it keeps serving; each group is read at
    one moment. Written to FILE.partial first, renamed once complete."""
    partial = file.with_name(file.name + ".partial")
    started = time.perf_counter()
    if url is not None:
        params = {"group": group} if group else {}
        try:
            with httpx.stream(
                "GET", f"{url.rstrip('/')}/v1/backup", params=params, headers=_headers(key), timeout=TIMEOUT
            ) as response:
                if response.status_code != 200:
                    response.read()
                    _refusal(response)
                with partial.open("wb") as handle:
                    for chunk in response.iter_bytes():
                        handle.write(chunk)
        except httpx.HTTPError as error:
            partial.unlink(missing_ok=True)
            fail(f"cannot reach {url}: {type(error).__name__}", 1, code="server_unreachable")
        summary = {"file": str(file), "bytes": partial.stat().st_size}
    else:
        with open_service(ctx, data_dir) as service:
            written = service.backup(partial, group_id=group)
        summary = {
            "file": str(file),
            "bytes": partial.stat().st_size,
            "groups": len(written.groups),
            "records": written.records,
        }
    partial.replace(file)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    if as_json:
        print_json(summary)
        return
    out.print(f"wrote {file} ({summary['bytes']} bytes) in {summary['seconds']} s")


def restore(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="a backup file", exists=True, dir_okay=False)],
    url: Url = None,
    key: Key = None,
    data_dir: DataDir = None,
    as_json: AsJson = False,
) -> None:
    """Restore a backup into an empty data folder (or, with --url, into a running server that holds none
    of its groups). The file is checked whole (format, checksum, embedding model) before anything is written."""
    started = time.perf_counter()
    if url is not None:
        headers = {**_headers(key), "Content-Type": "application/gzip"}
        try:
            with file.open("rb") as body:
                response = httpx.post(f"{url.rstrip('/')}/v1/restore", content=body, headers=headers, timeout=TIMEOUT)
        except httpx.HTTPError as error:
            fail(f"cannot reach {url}: {type(error).__name__}", 1, code="server_unreachable")
        if response.status_code != 200:
            _refusal(response)
        receipt = response.json()
    else:
        with open_service(ctx, data_dir) as service:
            receipt = service.restore(file).model_dump(mode="json")
    receipt["seconds"] = round(time.perf_counter() - started, 2)
    if as_json:
        print_json(receipt)
        return
    groups, records = len(receipt["groups"]), receipt["records"]
    out.print(
        f"restored {groups} groups ({receipt['collections']} collections, {records} records) in {receipt['seconds']} s"
    )


def register(app: typer.Typer) -> None:
    app.command()(backup)
    app.command()(restore)
