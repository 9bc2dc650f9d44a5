"""Sources through the HTTP API (``/grounded/v1/sources``), in-process over the real ShardHost
(test_http.py's world): only an admin declares, runs and removes them, only where the
operator allows; a run begun by the API ends in the background and is counted, audited and
answered from, with each file's access list from the rules; the scheduler runs what is due."""

from __future__ import annotations

import asyncio
import time

import pytest

from serve.config import load_config
from serve.identity.audit import AuditLog
from serve.shards.host import ShardHost
from serve.shards.sources import SourceFields
from tests.unit.serve.test_http import auth, error_of, world  # noqa: F401

pytestmark = pytest.mark.unit
SOURCES = "/grounded/v1/sources"


@pytest.fixture
def share(tmp_path):
    root = tmp_path / "shares" / "acme"
    (root / "hr").mkdir(parents=True)
    (root / "hr" / "salaries.md").write_text("# Salaries\n\nThe salary review is in March.")
    (root / "leave.md").write_text("# Leave\n\nAnnual leave is twentyseven days.")
    return root


def ended(client, headers, name: str) -> dict:
    """The source once its run has ended (the API answers before it does)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        view = client.get(f"{SOURCES}/{name}", headers=headers).json()
        if view["last_run"] is not None and not view["running"]:
            return view
        time.sleep(0.05)
    raise AssertionError(f"the run of {name} did not end: {view}")


def test_an_admin_declares_runs_and_removes_a_source_within_the_allowed_locations(
    world,  # noqa: F811
    share,
    tmp_path,
):
    build, secrets = world
    # Entered: one event loop for the test, as a replica has (background runs go on in it).
    with build(sources={"allowed_locations": [f"folder:{tmp_path / 'shares'}"]}) as client:
        admin, eng, hr = (auth(secrets[k]) for k in ("acme-admin", "acme-eng", "acme-hr"))
        body = {"name": "share", "source": f"folder:{share}", "rules": ["hr/**=group:hr"]}

        refused = client.post(SOURCES, headers=eng, json=body)  # ingest scope: not an admin
        assert refused.status_code == 403 and "admin" in error_of(refused)["message"]
        assert client.get(SOURCES).status_code == 401
        outside = client.post(SOURCES, headers=admin, json={**body, "source": f"folder:{tmp_path}"})
        assert outside.status_code == 403
        assert "sources.allowed_locations" in error_of(outside)["message"]
        escape = {**body, "source": f"folder:{tmp_path / 'shares'}/../data"}  # resolved first
        assert client.post(SOURCES, headers=admin, json=escape).status_code == 403
        typo = client.post(SOURCES, headers=admin, json={**body, "every": "often"})
        assert typo.status_code == 400 and error_of(typo)["param"] == "every"

        created = client.post(SOURCES, headers=admin, json=body)
        assert created.status_code == 200, created.text
        assert created.json()["object"] == "grounded.source" and created.json()["last_run"] is None
        assert client.post(SOURCES, headers=admin, json=body).status_code == 409  # the same name

        started = client.post(f"{SOURCES}/share/sync", headers=admin)
        assert started.status_code == 200 and started.json()["running"] is True
        view = ended(client, admin, "share")
        assert (view["last_run"]["added"], view["files"], view["last_run"]["error"]) == (2, 2, None)

        def names(headers) -> list[str]:
            listed = client.get("/v1/files", headers=headers).json()["data"]
            return sorted(f["filename"] for f in listed)

        assert names(hr) == ["leave.md", "salaries.md"] and names(eng) == ["leave.md"]

        audit = AuditLog(tmp_path / "data", build().app.state.gateway.config.audit)
        deadline = time.monotonic() + 10  # the run's entry follows its report
        while time.monotonic() < deadline:
            entries = {e["endpoint"]: e for e in audit.entries(tenant="acme")}
            if "sources.run" in entries:
                break
            time.sleep(0.05)
        assert {"sources.add", "sources.sync", "sources.run"} <= set(entries)
        assert entries["sources.run"]["identity"].startswith("key:")  # the admin who asked
        assert entries["sources.run"]["question"].startswith(
            'share: {"source": "share", "added": 2'
        )

        removed = client.delete(f"{SOURCES}/share", headers=admin)
        assert removed.json() == {"object": "grounded.source", "name": "share", "deleted": True,
                                  "documents": 2}  # fmt: skip
        assert names(hr) == [] and client.get(f"{SOURCES}/share", headers=admin).status_code == 404


def test_the_scheduler_adds_the_configured_sources_and_runs_them_when_due(
    fake_service, share, tmp_path
):
    declared = SourceFields(name="share", source=f"folder:{share}", every="1s")
    config = load_config(None, data_dir=str(tmp_path / "data"),
                         sources={"declared": {"acme": [declared.model_dump()]}})  # fmt: skip
    runs = ShardHost(config, lambda root: fake_service).sources
    fake_service.shard("acme", create=True)

    async def scenario():
        await runs.declare_configured()
        await runs.declare_configured()  # at each start: already there
        first = await runs.run_due()  # never ran: due
        assert [(r.source, r.added, r.error) for r in first] == [("share", 2, None)]
        assert await runs.run_due() == []  # ran less than a second ago
        await asyncio.sleep(1.1)
        (again,) = await runs.run_due()
        assert (again.added, again.unchanged) == (0, 2)

    asyncio.run(scenario())
