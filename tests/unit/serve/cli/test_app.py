"""The command modules register on the one `grounded` app, in the order `--help` lists them."""

import pytest
import typer

from serve.cli import app

pytestmark = pytest.mark.unit


def test_every_command_is_registered_in_the_help_order():
    root = typer.main.get_command(app)
    assert list(root.commands) == [
        "ingest", "search", "docs", "access", "delete", "reindex", "stats", "ask", "eval",
        "check-config", "usage", "audit", "backup", "restore", "up", "models", "keys", "stores",
        "sources",
    ]  # fmt: skip
    groups = {name: list(root.commands[name].commands)
              for name in ("models", "keys", "stores", "sources")}  # fmt: skip
    assert groups == {
        "models": ["list", "fetch"],
        "keys": ["create", "list", "budget", "revoke"],
        "stores": ["list", "create", "show", "add", "remove", "delete"],
        "sources": ["add", "list", "sync", "watch", "remove"],
    }
