"""The ``grounded`` executable: global options are accepted after the command name too.

Click reads the group's options (``--config/-c``, ``--data-dir``, ``--verbose/-v``) only before
the command name, so ``grounded up --config configs/cpu.yaml`` would fail with "No such option".
Users write it both ways: such options are moved before the command, unless that command defines
an option of the same name itself.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer


def _options(command: Any) -> dict[str, Any]:
    # Typer vendors its own click, so its classes are told apart by what they say they are.
    return {name: p for p in command.params if p.param_type_name == "option" for name in p.opts}


def hoist_global_options(root: Any, args: Sequence[str]) -> list[str]:
    """``args`` with the root group's options that follow the command path moved before it."""
    known = _options(root)
    rest = list(args)

    def take(into: list[str]) -> None:  # an option, and its value when it takes one
        token = rest.pop(0)
        into.append(token)
        option = known.get(token.split("=", 1)[0])
        if option is not None and not option.is_flag and "=" not in token and rest:
            into.append(rest.pop(0))

    head: list[str] = []
    while rest and rest[0].startswith("-"):
        take(head)
    path: list[str] = []
    command, context = root, typer.Context(root)
    while rest and hasattr(command, "get_command"):
        sub = command.get_command(context, rest[0])
        if sub is None:
            break
        path.append(rest.pop(0))
        command = sub
    own = _options(command)
    moved: list[str] = []
    kept: list[str] = []
    while rest:
        name = rest[0].split("=", 1)[0]
        if name == "--":
            kept += rest
            break
        if name in known and name not in own:
            take(moved)
        else:
            kept.append(rest.pop(0))
    return head + moved + path + kept


def entry_point() -> None:
    from serve.cli import app

    root = typer.main.get_command(app)
    root(args=hoist_global_options(root, sys.argv[1:]), prog_name="grounded")
