"""Where the appliance's shared state lives (``state:`` in the config).

One node: embedded SQLite files in the data directory (``usage.sqlite``, ``responses.sqlite``),
as before; nothing to install. Several nodes: one PostgreSQL server that every node reaches
(``state.url: postgresql://...``). SQLite's WAL mode needs every process on one host (its index
lives in shared memory) and does not work over a network file system, so a data directory
shared over NFS is not a way to share these databases.

Each store (the usage ledger, the stored responses) opens a ``Database``: the same SQL for both
(``?`` placeholders; types both read alike: BIGINT, DOUBLE PRECISION, TEXT), one writer
decision per ``transaction()``, and its migrations applied at start-up, each once. On
PostgreSQL a store's tables live in a schema of their own (``usage``, ``responses``), and a
transaction that names a ``lock`` holds a transaction-scoped advisory lock on it, so that
decisions about one subject (a tenant's budget) are serialised across every node, as SQLite's
``BEGIN IMMEDIATE`` serialises them on one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from index.errors import GroundedError

T = TypeVar("T")


class StateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    url: SecretStr | None = Field(
        None,
        description="postgresql://user:password@host:port/database: the shared state of "
        "several nodes (kept out of printed configs; set it with GROUNDED_STATE__URL to keep "
        "the password out of the file). None: SQLite files in the data directory (one node).",
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, description="Connecting, and each reply of the server, waits this long."
    )
    statement_timeout_s: float = Field(
        30.0, gt=0, description="The server cancels a statement that runs longer (503, retry)."
    )
    lock_timeout_s: float = Field(
        30.0, gt=0,
        description="The server gives up waiting for a lock (a tenant's admissions, a key being "
        "changed) after this long (503, retry).",
    )  # fmt: skip
    idle_in_transaction_timeout_s: float = Field(
        60.0, gt=0,
        description="The server ends a session idle inside a transaction this long (a process "
        "that vanished mid-admission), releasing its locks.",
    )  # fmt: skip
    shard_lease_s: float = Field(
        15.0, gt=0,
        description="How long a Shards replica owns a tenant's shard without renewing (every "
        "third of it): the longest a tenant waits for a new owner after its node dies.",
    )  # fmt: skip

    snapshot_every: int = Field(
        200, ge=1,
        description="A tenant's owner stores a snapshot of its shard once the tenant's log holds "
        "this many writes since the last (several nodes): a takeover replays at most about "
        "this many.",
    )  # fmt: skip
    snapshot_mb: float = Field(
        256.0, gt=0,
        description="... or this many MB of uploaded files since the last snapshot.",
    )  # fmt: skip

    @field_validator("url")
    @classmethod
    def _postgresql(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return value
        parts = urlsplit(value.get_secret_value())
        if parts.scheme not in ("postgresql", "postgres") or not parts.hostname:
            raise ValueError(
                "url must look like postgresql://user:password@host:5432/grounded (or be left "
                "out for SQLite files in the data directory, one node)"
            )
        if not parts.path.strip("/"):
            raise ValueError("url names no database: end it with /<database>, e.g. /grounded")
        tls_context(parts.query)  # an unknown sslmode, or a CA file that is not there
        return value


# Calls that wait on another server (the state database, an identity provider) run in threads
# of their own: a stalled server ties these up, never the event loop's default executor, which
# the rest of a process's blocking work shares (the relevance judge, shard reads, ingestion).
_WAITING = ThreadPoolExecutor(max_workers=16, thread_name_prefix="grounded-state")


async def off_loop(call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)`` in the state threads (as ``asyncio.to_thread`` does it in
    the default executor, the context included)."""
    context = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(
        _WAITING, functools.partial(context.run, call, *args, **kwargs)
    )


class StateUnavailableError(GroundedError):
    """The state database cannot be reached: the request is refused, nothing half-written."""

    status = 503
    type = "service_unavailable"
    code = "state_unavailable"
    retry_after = 2


class OutcomeUnknownError(StateUnavailableError):
    """The link to the state server was lost while a COMMIT was under way: the change may or
    may not have been made. Retrying is safe where the change is idempotent or carries an
    Idempotency-Key; else look before retrying."""

    code = "outcome_unknown"


class Cursor(Protocol):
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...


class Connection(Protocol):
    def execute(self, sql: str, args: Sequence[Any] = ()) -> Cursor: ...
    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None: ...


class Database(Protocol):
    dialect: str  # "sqlite" or "postgresql"
    where: str  # for messages: a file or a server

    def transaction(self, lock: str | None = None) -> Iterator[Connection]: ...
    def read(self) -> Iterator[Connection]: ...
    def close(self) -> None: ...


Migrations = Sequence[str] | Mapping[str, Sequence[str]]


def open_database(
    config: StateConfig,
    data_dir: Path,
    name: str,
    migrations: Migrations,
    synchronous: str = "NORMAL",
) -> Database:
    """Store ``name``'s database (``<data_dir>/<name>.sqlite``, or schema ``name`` on the
    PostgreSQL server), with ``migrations`` applied: SQL scripts, each run once, in order (by
    dialect where they differ: {"sqlite": ..., "postgresql": ...}). ``synchronous``: SQLite's
    setting (FULL: each commit on disk before it returns; PostgreSQL's commits always are)."""
    if config.url:
        url = config.url.get_secret_value()
        steps = migrations["postgresql"] if isinstance(migrations, Mapping) else migrations
        return PostgresDatabase(url, name, steps, config.connect_timeout_s, server_settings(config))
    steps = migrations["sqlite"] if isinstance(migrations, Mapping) else migrations
    return SqliteDatabase(Path(data_dir) / f"{name}.sqlite", steps, synchronous)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]


class SqliteDatabase:
    """One SQLite file (WAL): one connection, shared by the event loop and worker threads
    under a lock; other processes on this host are serialised by SQLite's own locking."""

    dialect = "sqlite"

    def __init__(self, path: Path, migrations: Sequence[str], synchronous: str = "NORMAL") -> None:
        self.path = path
        self.where = str(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous is NORMAL or FULL, not {synchronous!r}")
        self._db.execute(f"PRAGMA synchronous={synchronous}")
        with self.transaction() as db:  # user_version counts the migrations applied
            (applied,) = db.execute("PRAGMA user_version").fetchone()
            for version, script in enumerate(migrations[applied:], start=applied + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {version}")

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[sqlite3.Connection]:
        """``lock`` is for PostgreSQL: here every write transaction is serialised."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            yield self._db

    def close(self) -> None:
        self._db.close()


class _PgConnection:
    """A pg8000 connection read as sqlite3's: ``execute`` returns something to fetch from.
    ``?`` placeholders become pg8000's ``%s`` (the SQL here has no literal ``?`` or ``%``)."""

    def __init__(self, connection) -> None:
        self._connection = connection

    def execute(self, sql: str, args: Sequence[Any] = ()):
        cursor = self._connection.cursor()
        if args:
            cursor.execute(sql.replace("%", "%%").replace("?", "%s"), tuple(args))
        else:  # sent as it is
            cursor.execute(sql)
        return cursor

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        for row in rows:
            self.execute(sql, row)


_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


SSLMODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")


def tls_context(query: str):
    """TLS to the server as the URL's ``sslmode`` asks (libpq's names): ``disable``, none;
    ``allow``/``prefer`` (the default), TLS when the server offers it, unverified; ``require``,
    TLS or no connection, unverified; ``verify-ca``, the server's certificate checked against
    ``sslrootcert`` (else the system's authorities); ``verify-full``, that and the host name.
    Returns what pg8000's ``ssl_context`` takes."""
    import ssl

    given = {k: v[-1] for k, v in parse_qs(query).items()}
    mode = given.get("sslmode", "prefer")
    if mode not in SSLMODES:
        raise ValueError(f"sslmode={mode!r} in the state url: use one of {', '.join(SSLMODES)}")
    if mode == "disable":
        return False
    if mode in ("allow", "prefer"):
        return None
    if mode == "require":
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        return context
    root = given.get("sslrootcert")
    if root is not None and not Path(root).is_file():
        raise ValueError(f"sslrootcert={root!r} in the state url: no such file")
    context = ssl.create_default_context(cafile=root)
    context.check_hostname = mode == "verify-full"
    return context


def server_settings(config: StateConfig) -> dict[str, str]:
    """The session settings every connection sets: the server's own timeouts and keepalives
    (the client's socket has SO_KEEPALIVE too: pg8000's default)."""
    return {
        "statement_timeout": f"{round(config.statement_timeout_s * 1000)}ms",
        "lock_timeout": f"{round(config.lock_timeout_s * 1000)}ms",
        "idle_in_transaction_session_timeout": (
            f"{round(config.idle_in_transaction_timeout_s * 1000)}ms"
        ),
        # The server's side of the link: a client host that vanished (its session idle, not
        # in a transaction) is found within about a minute, not the OS's two hours.
        "tcp_keepalives_idle": "30",
        "tcp_keepalives_interval": "10",
        "tcp_keepalives_count": "3",
    }


# SQLSTATEs of a server that cannot do the work now, though the request is sound: a 503 to
# retry, not a 500 (read-only after a failover, disk full, out of memory or connections, a
# statement or lock timeout, shutting down, a serialization failure or deadlock, a session
# ended while idle in a transaction, and every connection exception: class 08).
RETRYABLE = {"25006", "53100", "53200", "53300", "57014", "55P03", "57P01", "57P02", "57P03",
             "40001", "40P01", "25P03"}  # fmt: skip


def server_error(exc: BaseException) -> tuple[str, str]:
    """(SQLSTATE, message) of an error the server sent (pg8000 passes its fields)."""
    fields = exc.args[0] if exc.args and isinstance(exc.args[0], dict) else {}
    return str(fields.get("C", "")), str(fields.get("M", exc))


def _count(store: str, code: str) -> None:
    """A state error in the metrics (serve/metrics.py), where metrics are kept."""
    try:
        from serve.metrics import metrics

        metrics().state_errors.inc(tags={"store": store, "code": code})
    except Exception:  # no Ray here (a command): nothing to count
        pass


class PostgresDatabase:
    """A store's schema on a PostgreSQL server: one connection per process (a lock serialises
    its threads), reopened after the server or the network drops it."""

    dialect = "postgresql"

    def __init__(
        self,
        url: str,
        schema: str,
        migrations: Sequence[str],
        timeout_s: float = 10.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"{schema!r} is not a schema name")
        self.url, self.schema, self.timeout_s = url, schema, timeout_s
        self.settings = settings if settings is not None else server_settings(StateConfig())
        parts = urlsplit(url)
        self.where = f"PostgreSQL at {parts.hostname}:{parts.port or 5432}{parts.path}"
        self._lock = threading.Lock()
        self._connection = None
        with self.transaction(lock=f"migrations:{schema}") as db:
            db.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
            db.execute(f"SET LOCAL search_path TO {schema}")
            db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations (version BIGINT PRIMARY KEY, "
                "applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            (applied,) = db.execute(
                "SELECT coalesce(max(version), 0) FROM schema_migrations"
            ).fetchone()
            for version, script in enumerate(migrations[applied:], start=applied + 1):
                for statement in _statements(script):
                    db.execute(statement)
                db.execute("INSERT INTO schema_migrations (version) VALUES (?)", (version,))

    def _connect(self):
        import pg8000.dbapi

        parts = urlsplit(self.url)
        try:
            connection = pg8000.dbapi.connect(
                user=unquote(parts.username or "postgres"),
                password=unquote(parts.password) if parts.password else None,
                host=parts.hostname,
                port=parts.port or 5432,
                database=unquote(parts.path.lstrip("/")),
                timeout=self.timeout_s,
                application_name="grounded",
                ssl_context=tls_context(parts.query),
            )
        except Exception as exc:  # pg8000 raises InterfaceError, OSError or its own errors
            raise StateUnavailableError(
                f"cannot reach the state database ({self.where}): {exc}; check state.url and "
                "that the server is up"
            ) from exc
        connection.autocommit = True  # transactions are begun and ended here, explicitly
        cursor = connection.cursor()
        cursor.execute(f"SET search_path TO {self.schema}")
        for name, value in self.settings.items():
            cursor.execute(f"SET {name} = '{value}'")
        return connection

    @contextmanager
    def transaction(self, lock: str | None = None) -> Iterator[_PgConnection]:
        """One transaction; ``lock``: a name whose advisory lock it holds until it ends (every
        transaction naming it, on any node, waits for this one)."""
        import pg8000.exceptions

        lost = (pg8000.exceptions.InterfaceError, OSError)  # the connection, not the SQL
        with self._lock:
            if self._connection is None:
                self._connection = self._connect()
            db, committing = _PgConnection(self._connection), False
            try:
                db.execute("BEGIN")
                try:  # a lock refused (lock_timeout) rolls back too: never left idle in it
                    if lock is not None:
                        db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (lock,))
                    yield db
                except BaseException:
                    with contextlib.suppress(*lost):  # then lost below, as the caller's error
                        db.execute("ROLLBACK")
                    raise
                committing = True
                db.execute("COMMIT")
            except lost as exc:
                self._drop()
                _count(self.schema, "unknown" if committing else "lost")
                if committing:
                    raise OutcomeUnknownError(
                        f"lost the state database ({self.where}) while committing: the change "
                        f"may or may not have been made ({exc}); check, or retry with the same "
                        "Idempotency-Key"
                    ) from exc
                raise StateUnavailableError(
                    f"lost the state database ({self.where}): {exc}; retry"
                ) from exc
            except pg8000.exceptions.DatabaseError as exc:
                code, message = server_error(exc)
                if code not in RETRYABLE and not code.startswith("08"):
                    raise  # a fault of this code: a 500 with its trace in the log
                if code.startswith("08") or code.startswith("57P") or code == "25P03":
                    self._drop()  # the session is gone
                _count(self.schema, code)
                raise StateUnavailableError(
                    f"the state database ({self.where}) cannot do it now ({code}: {message}); retry"
                ) from exc

    @contextmanager
    def read(self) -> Iterator[_PgConnection]:
        with self.transaction() as db:
            yield db

    def _drop(self) -> None:
        try:
            if self._connection is not None:
                self._connection.close()
        except Exception:  # already gone
            pass
        self._connection = None

    def close(self) -> None:
        with self._lock:
            self._drop()
