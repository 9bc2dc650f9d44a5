"""The ``grounded`` command line: ingest, search, list, delete, reindex and inspect shards.

``--json`` output is stable and documented in docs/cli.md; errors go to stderr with exit code 1.

One module per group of commands, each with a Typer of its own, registered below in the order
``grounded --help`` lists them; ``common`` holds what they share.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from index.errors import GroundedError
from serve.cli import answers, documents, keys, models, operations, sources, stores
from serve.cli.common import _fail, _State
from serve.config import load_config

__all__ = ["app"]

app = typer.Typer(
    help="Grounded: a self-hosted RAG appliance. Ingest documents per tenant and search them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(documents.commands)
app.add_typer(answers.commands)
app.add_typer(operations.commands)
app.add_typer(models.commands, name="models")
app.add_typer(keys.commands, name="keys")
app.add_typer(stores.commands, name="stores")
app.add_typer(sources.commands, name="sources")


@app.callback()
def main(
    ctx: typer.Context,
    data_dir: Annotated[
        Path | None,
        typer.Option(help="Data directory (default: $GROUNDED_DATA_DIR, else ./data)."),
    ] = None,
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="YAML config file (configs/cpu.yaml).")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress.")] = False,
) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, stream=sys.stderr)
    if not verbose:  # pypdf logs every repair it attempts; refusals already say what failed
        logging.getLogger("pypdf").setLevel(logging.ERROR)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        ctx.obj = _State(load_config(config, data_dir=data_dir))
    except GroundedError as exc:
        _fail(exc)
    ctx.call_on_close(lambda: ctx.obj.service and ctx.obj.service.close())
