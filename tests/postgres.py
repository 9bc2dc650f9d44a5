"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` package (`make setup`
installs it), a cluster of its own in a temporary folder, on a free loopback port. PostgreSQL
refuses to run as root, so as root the server runs as the package's ``postgres`` user."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def server_bin() -> Path:
    """The newest installed server's bin folder (Debian keeps it off PATH)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parts[-3]))  # fmt: skip
    if not found:
        raise RuntimeError(
            "no PostgreSQL server here (/usr/lib/postgresql/*/bin/initdb): `make setup` installs "
            "Debian's postgresql package"
        )
    return Path(found[-1]).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self) -> None:
        self.bin = server_bin()
        self.root = Path(tempfile.mkdtemp(prefix="grounded-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.user = "grounded"
        self._as = []
        if os.geteuid() == 0:
            self.root.chmod(0o755)
            shutil.chown(self.root, "postgres", "postgres")
            self._as = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self._as, *args], check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/grounded"

    def start(self) -> PostgresServer:
        if not self.data.exists():
            self._run(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust",
                      "-U", self.user, "-E", "UTF8", "--no-sync")  # fmt: skip
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
                   "-c max_connections=300 -c fsync=off")  # fmt: skip
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
                  "-l", str(self.root / "server.log"), "-w", "-t", "60", "start")  # fmt: skip
        self._create_database()
        return self

    def _create_database(self) -> None:
        import pg8000.dbapi

        connection = pg8000.dbapi.connect(user=self.user, host="127.0.0.1", port=self.port,
                                          database="postgres")  # fmt: skip
        connection.autocommit = True
        cursor = connection.cursor()
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = 'grounded'")
        if not cursor.fetchall():
            cursor.execute("CREATE DATABASE grounded")
        connection.close()

    def stop(self, mode: str = "fast") -> None:
        """``mode``: fast (clean) or immediate (as if the server crashed)."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def remove(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
