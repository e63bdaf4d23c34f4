"""``epimem erase-residue``: erase what deletes left in a stopped Chroma server's folder.

A Chroma server keeps deleted records' bytes in its write log, in SQLite free pages and in
orphaned segment folders (see memory.engine.erasure and docs/trust.md); epimem cannot reach a server's
files, so the operator runs this on the server's folder, on the same host, while it is stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from api.cli.common import fail
from epimem_client.errors import EpimemError


def erase_residue(
    chroma_path: Annotated[
        Path,
        typer.Option(
            "--chroma-path",
            help="the folder of `chroma run --path` (or <data dir>/chroma of epimem); nothing may have it open",
        ),
    ],
) -> None:
    """Erase deleted data left in a stopped Chroma folder: rebuild collections whose write log names
    deleted or overwritten records, drop write-log rows of dropped collections, vacuum with
    secure_delete, remove orphaned segment folders."""
    from memory.engine.erasure import erase_folder  # Chroma loads for this command only
    from memory.engine.folder_lock import LOCK_NAME, lock_folder, release_folder
    from memory.store.codec import unstamped
    from memory.store.connection import PARTITIONS_FOLDER

    # An epimem data folder (<data>/chroma): hold its lock, so a running service is never scrubbed under it.
    data_dir = chroma_path.resolve().parent
    locked = (data_dir / LOCK_NAME).exists()
    try:
        if locked:
            lock_folder(data_dir)
    except EpimemError as error:
        fail(error.message, 2, code=error.code)
    # An epimem data folder written since the partitions have an engine of their own: that folder too.
    partitions = data_dir / PARTITIONS_FOLDER
    folders = [chroma_path] + (
        [partitions] if locked and partitions.is_dir() and partitions != chroma_path.resolve() else []
    )
    try:
        reports = [erase_folder(folder, unstamped) for folder in folders]
    except FileNotFoundError as error:
        fail(str(error), 2)
    finally:
        if locked:
            release_folder(data_dir)
    report = reports[0]
    for more in reports[1:]:
        report.add(more)
    typer.echo(
        f"rebuilt {len(report.rebuilt)} collections ({', '.join(report.rebuilt) or '-'}), removed "
        f"{report.log_rows} write-log rows and {len(report.folders)} orphaned segment folders; "
        f"{report.bytes_before} -> {report.bytes_after} bytes in {report.seconds:.1f} s"
    )


def register(app: typer.Typer) -> None:
    app.command("erase-residue")(erase_residue)
