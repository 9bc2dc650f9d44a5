"""File servers for the source tests, each a real server in a process of its own on a free
loopback port: WebDAV from wsgidav (a folder served with basic authentication), S3 from moto's
server (an HTTP server speaking the S3 protocol). Both are dev dependencies (pyproject.toml)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from tests.postgres import _free_port

BIN = Path(sys.executable).parent
WEBDAV_USER, WEBDAV_PASSWORD = "reader", "a-webdav-secret"
S3_KEY_ID, S3_SECRET = "grounded-test", "an-s3-secret"


@contextlib.contextmanager
def _process(args: list[str], ready: str, auth=None) -> Iterator[str]:
    """The server started; its base URL once ``ready`` answers; stopped (by its pid) after."""
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.request("OPTIONS" if auth else "GET", ready, auth=auth).status_code < 500:
                    break
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start: {process.stderr.read().decode()}")
            time.sleep(0.1)
        yield ready.rstrip("/")
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextlib.contextmanager
def webdav_server(root: Path, scratch: Path) -> Iterator[str]:
    """``root`` served over WebDAV for WEBDAV_USER (basic authentication); its URL."""
    port = _free_port()
    config = {
        "host": "127.0.0.1", "port": port, "provider_mapping": {"/": str(root)},
        "http_authenticator": {"accept_basic": True, "accept_digest": False,
                               "default_to_digest": False},
        "simple_dc": {"user_mapping": {"*": {WEBDAV_USER: {"password": WEBDAV_PASSWORD}}}},
        "verbose": 0, "logging": {"enable_loggers": []},
    }  # fmt: skip
    path = scratch / "wsgidav.yaml"
    path.write_text(yaml.safe_dump(config))
    url = f"http://127.0.0.1:{port}/"
    with _process([str(BIN / "wsgidav"), "--config", str(path)], url,
                  auth=(WEBDAV_USER, WEBDAV_PASSWORD)) as started:  # fmt: skip
        yield started


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """moto's S3 server (any key pair is accepted); its endpoint URL."""
    port = _free_port()
    with _process([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                  f"http://127.0.0.1:{port}/") as started:  # fmt: skip
        yield started
