"""What the ``grounded`` commands share: the consoles, the option types, the state the global
options build, and the helpers that print tables and JSON and turn errors into one line.

The command modules import from here, never from each other or from ``serve.cli`` itself, so
the package has no import cycle.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from index.errors import GroundedError, InvalidRequestError
from index.service import IndexService
from serve.config import AppConfig

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

TenantOpt = Annotated[str, typer.Option("--tenant", "-t", help="Tenant id (lowercase).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AttrOpt = Annotated[
    list[str] | None, typer.Option("--attr", help="KEY=VALUE attribute (repeatable).")
]


def _attributes(pairs: list[str] | None) -> dict[str, str]:
    attributes = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise typer.BadParameter(f"{pair!r}: use KEY=VALUE", param_hint="--attr")
        attributes[key.strip()] = value.strip()
    return attributes


@dataclasses.dataclass
class _State:
    config: AppConfig
    service: IndexService | None = None

    def index(self) -> IndexService:
        """The data directory's shards, in this process. Not with several nodes: there each
        shard is owned by a Shards replica, which logs its writes (serve/state/shard_owners.py);
        a copy here would miss them, and writes here would be lost to the other nodes."""
        if self.config.state.url:
            raise InvalidRequestError(
                "this config shares state between nodes (state.url): tenants' documents are "
                "owned by the running appliance's Shards replicas, so this command cannot work "
                "on them here; use the HTTP API (POST /v1/files, GET /v1/files, "
                "/v1/vector_stores) or the same command against a one-node config",
                param="state.url",
            )
        if self.service is None:
            from serve.query.instruction_judge import instruction_judge

            judge = instruction_judge(self.config.index.screen, self.config.query.rerank)
            self.service = IndexService(self.config.index, self.config.data_dir,
                                        instruction_judge=judge).start()  # fmt: skip
        return self.service


def _fail(exc: GroundedError) -> None:
    err.print(f"[red]error:[/red] {exc.message}", markup=True, highlight=False)
    raise typer.Exit(1)


def _table(*headers: str, whole: tuple[str, ...] = ()) -> Table:
    """A table whose cells wrap rather than truncate; ``whole`` columns (ids to copy) never
    wrap."""
    table = Table()
    for header in headers:
        table.add_column(header, overflow="fold", no_wrap=header in whole)
    return table


def _progress(transient: bool = False) -> Progress:
    """A progress bar on stderr, shown only on a terminal (never mixed into --json output)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=transient,
        disable=not err.is_terminal,
    )


def _print_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, ensure_ascii=False, indent=2) + "\n")


def _run(fn):
    """Turn GroundedError into a one-line message and exit code 1."""
    try:
        return fn()
    except GroundedError as exc:
        _fail(exc)
