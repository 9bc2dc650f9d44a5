"""Sources inside the appliance: the Shards host declares, lists, removes and runs each tenant's
sources (index/sources/), on demand (``POST /grounded/v1/sources/{name}/sync``, answered at
once, the run going on in the background) and when due (``watch``: every ``sources.poll_s`` the
data directory's shards are asked, read-only, which of their sources' intervals have passed).

A run is one at a time per source (its claim in the tenant's shard: a second is refused while
the first reports), in a thread beside the requests. Each run is counted in Prometheus
(``grounded_source_*``) and written to the audit trail (endpoint ``sources.run``, the run's
report as its text). Sources declared in the configuration (``sources.declared``) are added
at start; through the HTTP API a location must be under ``sources.allowed_locations``, so that
a tenant's admin cannot read the appliance's own disk or reach its internal network.

With several nodes a source runs at its tenant's owner (a tenant another replica owns is left
to it), and each batch of its writes, and each declaration and removal, is logged under the
tenant's lease before it is applied (serve/state/shard_owners.py): a new owner replays them
with the same ``apply`` (serve/shards/ingestion.py ``Replaying``), and a run on an owner that
lost its lease stops at its next batch (nothing after it is applied). A run is one at a time
per source: the claim in the shard on one node, the host's own record with several (only the
owner runs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from index.access import Reader
from index.errors import (
    ConflictError,
    DocumentNotFoundError,
    GroundedError,
    PermissionDeniedError,
)
from index.sources import state
from index.sources.kinds import parse_location
from index.sources.sync import Batch, Run, apply, sync
from serve.identity.audit import AuditEntry, AuditLog
from serve.metrics import metrics

if TYPE_CHECKING:
    from serve.shards.host import ShardHost

log = logging.getLogger("grounded")


class SourceFields(BaseModel):
    """A source as it is declared (the HTTP API's body, an entry of ``sources.declared``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="kind:location, e.g. folder:/mnt/hr or s3:bucket/docs")
    access: str | None = Field(None, description="Readers where no rule says (default tenant).")
    rules: list[str] = Field(default_factory=list, description="glob=access, first match wins.")
    every: str | None = Field(None, description="How often it runs (10m, 1h); none: on demand.")
    access_from: str | None = Field(None, pattern="^posix$", description="posix: a folder's own.")
    names: list[str] = Field(default_factory=list, description="principal=principal mappings.")


class SourcesConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    run: bool = Field(True, description="Run the sources whose interval has passed.")
    poll_s: float = Field(5.0, gt=0, description="How often due sources are looked for.")
    allowed_locations: list[str] = Field(
        default_factory=list,
        description="Where sources declared through the HTTP API may read: kind:location "
        "prefixes (folder:/mnt/shares, webdav:https://cloud.example.com/); none: the API "
        "declares none (the CLI and `declared` are the operator's).",
    )
    declared: dict[str, list[SourceFields]] = Field(
        default_factory=dict, description="Tenant -> its sources, added at start (GitOps)."
    )


class SourceRuns:
    def __init__(self, host: ShardHost, config: SourcesConfig) -> None:
        self.host, self.config = host, config
        self._tasks: set[asyncio.Task] = set()
        self._running: set[tuple[str, str]] = set()  # (tenant, name) running in this host
        self._audit: AuditLog | None = None

    async def listed(self, tenant: str, reader: Reader) -> list[dict[str, Any]]:
        _admin(reader)
        shard = await self.host.shard(tenant)
        return [self._view(tenant, d) for d in await asyncio.to_thread(state.listed, shard)]

    def _view(self, tenant: str, declared: state.Declared) -> dict[str, Any]:
        view = declared.view()
        return {**view, "running": view["running"] or (tenant, declared.name) in self._running}

    async def declare(self, tenant: str, reader: Reader | None, fields: SourceFields) -> dict:
        """``reader`` None: the configuration's (any location); else an admin's, within
        ``allowed_locations``."""
        if reader is not None:
            _admin(reader)
            self._check_allowed(fields.source)
        declared = await asyncio.to_thread(
            state.checked, fields.name, fields.source, access=fields.access, rules=fields.rules,
            every=fields.every, posix=fields.access_from == "posix", names=fields.names,
        )  # fmt: skip
        shard = await self.host.shard(tenant)
        async with self.host._write(shard, tenant, "source_declare", declared.stored()):
            await asyncio.to_thread(state.add, shard, declared)
        return declared.view()

    def _check_allowed(self, spec: str) -> None:
        kind, location = parse_location(spec)
        wanted = f"{kind}:{location}"
        for prefix in self.config.allowed_locations:
            root = prefix.rstrip("/")
            if wanted == root or wanted.startswith(root + "/"):
                return
        allowed = ", ".join(self.config.allowed_locations) or "none is set"
        raise PermissionDeniedError(
            f"{wanted} is not under sources.allowed_locations ({allowed}): the appliance's "
            "operator names where sources may read (docs/sources.md)"
        )

    async def remove(self, tenant: str, reader: Reader, name: str, keep: bool) -> int:
        """The source forgotten, its documents deleted unless ``keep``; how many it held."""
        _admin(reader)
        shard = await self.host.shard(tenant)
        async with self.host._write(shard, tenant, "source_remove", {"name": name, "keep": keep}):
            return await asyncio.to_thread(state.remove, shard, name, keep)

    async def start(self, tenant: str, reader: Reader, name: str, confirm: bool) -> dict:
        """A run of ``name`` begun in the background; the source as it is then (409 while
        another run of it goes on)."""
        _admin(reader)
        shard = await self.host.shard(tenant)
        declared = await asyncio.to_thread(state.get, shard, name)
        self._check_idle(tenant, declared)
        task = asyncio.create_task(self.run(tenant, name, confirm, reader.identity))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_consumed)
        return {**declared.view(), "running": True}

    def _check_idle(self, tenant: str, declared: state.Declared) -> None:
        running = declared.running
        if (tenant, declared.name) in self._running:
            running = {"host": "", "pid": 0, "at": time.time()}  # this host's own run
        state.check_idle(declared.name, running, time.time())

    async def run_due(self) -> list[Run]:
        """Every due source of every tenant this node holds a copy of, one after another.
        With several nodes, a tenant another replica owns is its owner's to run (skipped)."""
        tenants, now, runs = self.host.tenant_directories(), time.time(), []
        for tenant in await asyncio.to_thread(tenants.tenants):
            directory = tenants.path_for(tenant)
            for name in await asyncio.to_thread(state.due_sources, directory, now):
                with contextlib.suppress(GroundedError):  # counted and audited by _run
                    runs.append(await self.run(tenant, name, False, f"source:{name}"))
        return runs

    async def declare_configured(self) -> None:
        """The sources of ``sources.declared`` that the tenants do not have yet, added; one
        that cannot be is logged (the others are added)."""
        for tenant, sources in self.config.declared.items():
            try:
                shard = await self.host.shard(tenant)
            except GroundedError as exc:  # owned by another replica: added there
                log.info("sources.declared of %s: not here (%s)", tenant, exc)
                continue
            have = {d.name for d in await asyncio.to_thread(state.listed, shard)}
            for fields in sources:
                if fields.name in have:
                    continue
                try:
                    await self.declare(tenant, None, fields)
                except GroundedError as exc:
                    log.error("source %s of %s (sources.declared): %s", fields.name, tenant, exc)

    async def watch(self) -> None:
        """Add the configured sources, then run the due ones every ``poll_s`` until
        cancelled; a failure is logged and tried again at the next poll."""
        await self.declare_configured()
        while self.config.run:
            try:
                await self.run_due()
            except Exception:
                log.exception("sources: looking for due runs failed; tried again")
            await asyncio.sleep(self.config.poll_s)

    async def run(self, tenant: str, name: str, confirm: bool, by: str) -> Run:
        """A run of ``name`` now, as ``by`` (who asked: the audit trail says), counted."""
        shard = await self.host.shard(tenant)  # with several nodes: owned here, or refused
        pipeline = self.host.service.pipeline_for(shard)
        declared = await asyncio.to_thread(state.get, shard, name)
        self._check_idle(tenant, declared)
        commit = None  # one node: applied at once, under the claim in the shard
        if self.host.ownership is not None:
            loop = asyncio.get_running_loop()

            def commit(batch: Batch) -> list[str]:  # from the run's thread
                logged = self._logged(shard, tenant, pipeline, batch)
                return asyncio.run_coroutine_threadsafe(logged, loop).result()

        self._running.add((tenant, name))
        try:
            run = await asyncio.to_thread(sync, shard, pipeline, declared,
                                          confirm_deletes=confirm, commit=commit)  # fmt: skip
        except GroundedError as exc:
            run = Run(name, error=exc.message, finished_at=time.time())
            log.warning("source %s of %s: %s", name, tenant, exc.message)
            await self._account(tenant, name, by, run, declared.files)
            raise
        finally:
            self._running.discard((tenant, name))
        held = (await asyncio.to_thread(state.get, shard, name)).files
        await self._account(tenant, name, by, run, held)
        return run

    async def _logged(self, shard, tenant: str, pipeline, batch: Batch) -> list[str]:
        """Several nodes: a batch logged (fenced by the tenant's lease), then applied."""
        data = b"".join(batch.blobs)
        async with self.host._write(shard, tenant, "source_batch", batch.meta(), data):
            return await asyncio.to_thread(apply, shard, pipeline, batch)

    async def _account(self, tenant: str, name: str, by: str, run: Run, held: int) -> None:
        m, tags = metrics(), {"tenant": tenant, "source": name}
        m.source_runs.inc(tags={**tags, "outcome": "failed" if run.error else "done"})
        for change in ("added", "changed", "moved", "access", "deleted", "failed"):
            m.add(m.source_files, getattr(run, change), {**tags, "change": change})
        m.source_documents.set(held, tags=tags)
        if run.error is None:
            m.source_last_success.set(run.finished_at, tags=tags)
        if self._audit is None:
            config = self.host.config
            self._audit = AuditLog(config.data_dir, config.audit, state=config.state)
        report = json.dumps({k: v for k, v in run.json().items() if k != "failures"})
        entry = AuditEntry(tenant, by, "", (), "sources.run", f"{name}: {report}")
        await asyncio.to_thread(self._audit.append, entry)


def _admin(reader: Reader) -> None:
    if not reader.admin:
        raise PermissionDeniedError("sources are an admin's: use a key with the admin scope")


def replay_source(shard, pipeline, op: str, meta: dict, data: bytes) -> None:
    """A logged source write applied on a new owner exactly as it was by the old one
    (serve/state/shard_owners.py ``apply_entry``)."""
    if op == "source_batch":
        apply(shard, pipeline, Batch.logged(meta, data))
    elif op == "source_declare":
        with contextlib.suppress(ConflictError):  # applied before
            state.add(shard, state.Declared.of_stored(meta))
    elif op == "source_remove":
        with contextlib.suppress(DocumentNotFoundError):  # removed before
            state.remove(shard, meta["name"], meta["keep"])
    else:
        raise ValueError(f"unknown source operation {op!r}")


def _consumed(task: asyncio.Task) -> None:
    """A background run's end: a refusal was counted, audited and logged by ``_run``; any
    other error is logged here."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None and not isinstance(error, GroundedError):
        log.error("a source run failed", exc_info=error)
