"""Check the file settings before anything starts, so a bad one is one line, not a traceback.

``check_files(settings)`` looks at every setting that names a file or folder (the database,
the catalogue, the geo database, the DMA table, the cache folder) the way the edge will use
it (a PostgreSQL URL: one connection to it; the DMA table: read as the matcher reads it),
and raises ``SettingsError`` naming the variable, its flag, the path and the reason:

    EDGE_CATALOGUE (--catalogue): /srv/ads.json: no such file

The checks are cheap (no model, no catalogue parse); a catalogue that exists but does not
validate is reported by the matcher's start-up in the same one-line form.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

from edge.settings import Settings, SettingsError
from edge.store.migrations import NewerSchema, refuse_unknown
from edge.store.postgres import redact_url
from edge.store.sqlite import create_private
from geoip import GeoDatabaseError, open_reader
from matcher.catalogue import Catalogue, CatalogueError, load_catalogue
from matcher.geo import DmaTableError, read_dma_table

SERVER_CHECK_S = 10  # the longest a start waits for a PostgreSQL server to answer


def where(name: str) -> str:
    """``EDGE_DB (--db)`` for the setting ``db``."""
    return f"EDGE_{name.upper()} (--{name.replace('_', '-')})"


def bad(name: str, path: Path | str, reason: str) -> SettingsError:
    return SettingsError(f"{where(name)}: {path}: {reason}")


def _reason(exc: OSError | sqlite3.Error) -> str:
    if isinstance(exc, OSError):
        return (exc.strerror or str(exc)).lower()
    return str(exc)


def check_files(settings: Settings) -> None:
    check_db(settings)
    _readable_file("catalogue", settings.catalogue)
    _dma_table(settings.dma_table)
    _geo_db(settings.geoip_db)
    _writable_dir("cache_dir", settings.cache_dir)


def newer_schema_error(exc: NewerSchema) -> SettingsError:
    """The refusal of a database a newer release migrated: this release cannot know what
    those migrations changed (a rollback runs the newer release again, or restores a
    backup)."""
    return SettingsError(
        f"EDGE_DB (--db): a newer release migrated this database (its migration "
        f"{exc.newest} is not one this release ships): run that release, or restore "
        "a backup taken before the upgrade"
    )


def check_db(settings: Settings) -> None:
    """The database can be created (with its folder), opened and written, and no newer
    release migrated it (``newer_schema_error``): refused here, before anything is logged
    or loaded, in one line."""
    path = settings.db
    if isinstance(path, str):
        _check_server(path)
        return
    if path.is_dir():
        raise bad("db", path, "is a folder, not a database file")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise bad("db", path, "cannot create its folder: a part of the path is a file") from None
    except OSError as exc:
        raise bad("db", path, f"cannot create its folder: {_reason(exc)}") from None
    existed = path.exists()
    try:
        create_private(path)
        with contextlib.closing(sqlite3.connect(path, timeout=5.0)) as conn:
            # The edge writes from start-up on (migrations, keys); a read-only file, folder
            # or file system must stop it here, not on the first beacon.
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TEMP TABLE _edge_preflight (x)")
            conn.execute("ROLLBACK")
            conn.execute("PRAGMA schema_version").fetchone()
            if conn.execute(_HAS_MIGRATIONS_SQLITE).fetchone() is not None:
                refuse_unknown([r[0] for r in conn.execute("SELECT name FROM schema_migrations")])
    except NewerSchema as exc:
        raise newer_schema_error(exc) from None
    except sqlite3.Error as exc:
        raise bad("db", path, _sqlite_reason(exc, path)) from None
    except OSError as exc:
        raise bad("db", path, _reason(exc)) from None
    finally:
        if not existed:
            # An empty file left by the probe is fine for SQLite, but leave no trace of a
            # failed start.
            with contextlib.suppress(OSError):
                if path.exists() and path.stat().st_size == 0:
                    path.unlink()


def _check_server(url: str) -> None:
    """A PostgreSQL URL: the server answers it and lets the user in (one connection, at
    most ``SERVER_CHECK_S``); the URL is named without its password."""
    try:
        given = psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        # The driver's message quotes the URL, or the part it could not read: the password.
        raise bad(
            "db",
            redact_url(url),
            "cannot open: not a URL the PostgreSQL driver can read "
            "(postgresql://USER:PASSWORD@HOST:PORT/DBNAME; percent-encode characters such as "
            "@ : / % [ ] in the password)",
        ) from None
    try:
        # The URL's own connect_timeout, when it has one, is used (and so checked) as given.
        dsn = url
        if "connect_timeout" not in given:
            dsn = psycopg.conninfo.make_conninfo(url, connect_timeout=SERVER_CHECK_S)
        with psycopg.connect(dsn) as conn:
            if conn.execute("SELECT to_regclass('schema_migrations')").fetchone() != (None,):
                refuse_unknown([r[0] for r in conn.execute("SELECT name FROM schema_migrations")])
    except NewerSchema as exc:
        raise newer_schema_error(exc) from None
    except (psycopg.Error, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise bad("db", redact_url(url), f"cannot open: {first}") from None


_HAS_MIGRATIONS_SQLITE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
)


def _sqlite_reason(exc: sqlite3.Error, path: Path) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return "read-only: the edge must write to its database"
    if "not a database" in text:
        return "not an SQLite database"
    if "unable to open" in text:
        folder = path.parent
        if not os.access(folder, os.W_OK):
            return f"cannot open: the folder {folder} is not writable"
        return "cannot open it as an SQLite database"
    return text


def _readable_file(name: str, path: Path | None) -> None:
    if path is None:
        return
    if not path.exists():
        raise bad(name, path, "no such file")
    if path.is_dir():
        raise bad(name, path, "is a folder, not a file")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise bad(name, path, f"cannot read: {_reason(exc)}") from None


def check_catalogue(path: Path | None) -> Catalogue | None:
    """The catalogue file ``EDGE_CATALOGUE`` names, loaded (None when it names none); one
    that cannot be read or does not validate is a ``SettingsError`` naming the setting."""
    if path is None:
        return None
    _readable_file("catalogue", path)
    try:
        return load_catalogue(path)
    except CatalogueError as exc:
        raise invalid_catalogue(path, exc) from None


def invalid_catalogue(path: Path, exc: CatalogueError) -> SettingsError:
    """The one line for a catalogue file that does not validate: its first error."""
    first = ": ".join(exc.errors[0]) if exc.errors else "not valid"
    return bad(
        "catalogue",
        path,
        f"{len(exc.errors)} error(s), the first: {first} "
        "(`edge catalogue validate FILE` lists them all)",
    )


def _geo_db(path: Path | None) -> None:
    if path is None:
        return
    _readable_file("geoip_db", path)
    try:
        open_reader(path).close()
    except GeoDatabaseError as exc:
        raise bad("geoip_db", path, str(exc).removeprefix(f"{path} ")) from None


def _dma_table(path: Path | None) -> None:
    if path is None:
        return
    _readable_file("dma_table", path)
    try:
        read_dma_table(path)  # a few thousand lines at most: cheap enough to read twice
    except DmaTableError as exc:
        raise bad("dma_table", path, str(exc)) from None
    except OSError as exc:
        raise bad("dma_table", path, f"cannot read: {_reason(exc)}") from None


def _writable_dir(name: str, path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
        with _probe(path):
            pass
    except FileExistsError:
        raise bad(name, path, "is a file, not a folder") from None
    except OSError as exc:
        if exc.errno == errno.ENOTDIR:
            raise bad(name, path, "a part of it is a file, not a folder") from None
        raise bad(name, path, f"not writable: {_reason(exc)}") from None


@contextlib.contextmanager
def _probe(folder: Path) -> Iterator[None]:
    with tempfile.TemporaryFile(dir=folder):
        yield
