"""``grounded models``: list the known and fetched models, fetch one into the data directory."""

from __future__ import annotations

from typing import Annotated

import typer

from serve.cli.common import _progress, _run, out

commands = typer.Typer(
    help="Generator models, the relevance judge and embedders: shipped in registry packages, "
    "from a "
    "Hugging Face hub (hf:Org/Name), or a local model folder.",
    no_args_is_help=True,
)


@commands.command("list")
def models_list(ctx: typer.Context) -> None:
    """Known models and whether they are installed, then the hub models fetched into the data
    directory."""
    from serve.engine import hub
    from serve.engine.models import EMBEDDERS, JUDGES, MODELS, is_installed, models_dir

    for name, spec in [*MODELS.items(), *JUDGES.items(), *EMBEDDERS.items()]:
        state = "installed" if is_installed(name, ctx.obj.config.data_dir) else "not installed"
        out.print(f"{name:<22} {state:<14} {spec.description}")
    for model in hub.installed(models_dir(ctx.obj.config.data_dir)):
        where = f"commit {model.commit[:12]} from {model.endpoint}"
        out.print(f"{model.ref!s:<22} {'installed':<14} {where}")


@commands.command("fetch")
def models_fetch(
    ctx: typer.Context,
    name: Annotated[
        str,
        typer.Argument(
            help="A name from `grounded models list`, hf:Org/Name or hf:Org/Name@revision "
            "(a branch, tag or commit), or the path of a local model folder."
        ),
    ],
    token: Annotated[
        str | None,
        typer.Option(
            help="Hugging Face token for a private or gated repository (default: $HF_TOKEN, "
            "else the token saved by `hf auth login`). Used, never stored.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Install a model into the data directory (idempotent). A known name: its packages are
    verified by sha256, a generator is converted once to safetensors, an embedder once to a
    sentence-transformers folder. hf:Org/Name or
    hf:Org/Name@revision: the config, tokenizer and safetensors files of that revision, from
    $HF_ENDPOINT (default huggingface.co), into a folder of its own under models/; set
    generator.model to the same hf: name. HF_HUB_OFFLINE, which Grounded sets so that serving
    never downloads, does not apply to this explicit download. A local model folder: checked
    (config.json) and used where it is, nothing copied; set generator.model to its path."""
    from serve.engine.models import fetch, model_source

    source = model_source(name)
    data_dir = ctx.obj.config.data_dir
    if source != "named":  # huggingface_hub shows its own progress bars
        path = _run(lambda: fetch(name, data_dir, token=token))
        folder = source == "folder"
        what = "is a model folder, used where it is" if folder else f"is installed in {path}"
        out.print(f"{name} {what}; set generator.model: {path if folder else name}", markup=False)
        return
    with _progress() as progress:
        task = progress.add_task(f"assembling {name} (bytes)", total=None)

        def report(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        path = _run(lambda: fetch(name, data_dir, progress=report))
    out.print(f"{name} installed in {path}")
