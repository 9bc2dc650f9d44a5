"""The audit trail (serve/identity/audit.py): what each entry holds, how it is filtered and exported
(`grounded audit`), retention, the privacy switch, and that an acknowledged entry survives a
SIGKILL of the process that wrote it."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest
from typer.testing import CliRunner

from serve.cli import app
from serve.identity.audit import DAY, AuditConfig, AuditEntry, AuditLog

pytestmark = pytest.mark.unit


def entry(**fields) -> AuditEntry:
    base = dict(tenant="acme", identity="user:hana", key_id="key_1", groups=("hr",),
                endpoint="chat.completions", question="Salary band?", retrieved=("doc-a", "doc-b"),
                cited=("doc-a",), abstained=False)  # fmt: skip
    return AuditEntry(**{**base, **fields})


def test_entries_are_filtered_by_tenant_user_document_and_time(tmp_path):
    now = [1_000_000.0]
    log = AuditLog(tmp_path, AuditConfig(), clock=lambda: now[0])
    log.append(entry())
    now[0] += 60
    log.append(entry(tenant="globex", identity="key:key_9", key_id="key_9", retrieved=("doc-c",),
                     cited=(), abstained=True))  # fmt: skip
    now[0] += 60
    log.append(entry(endpoint="files.content", question=None, retrieved=("doc-b",), cited=(),
                     abstained=None))  # fmt: skip
    every = list(log.entries())
    assert [e["endpoint"] for e in every] == ["chat.completions", "chat.completions",
                                              "files.content"]  # fmt: skip
    first = every[0]
    assert (first["tenant"], first["identity"], first["groups"], first["question"]) == (
        "acme", "user:hana", ["hr"], "Salary band?")  # fmt: skip
    assert first["retrieved"] == ["doc-a", "doc-b"] and first["cited"] == ["doc-a"]
    assert first["abstained"] is False and every[1]["abstained"] is True
    assert every[2]["abstained"] is None
    assert len(list(log.entries(tenant="acme"))) == 2
    assert len(list(log.entries(user="hana"))) == 2 and len(list(log.entries(user="key_9"))) == 1
    assert [e["id"] for e in log.entries(document="doc-b")] == [every[0]["id"], every[2]["id"]]
    assert [e["id"] for e in log.entries(since=1_000_030.0, until=1_000_090.0)] == [every[1]["id"]]


def test_questions_can_be_left_out_and_old_entries_are_dropped(tmp_path):
    now = [0.0]
    log = AuditLog(tmp_path, AuditConfig(store_questions=False, retention_days=30),
                   clock=lambda: now[0])  # fmt: skip
    log.append(entry())
    assert next(log.entries())["question"] is None
    assert next(log.entries())["retrieved"] == ["doc-a", "doc-b"]  # who saw what stays
    now[0] = 31 * DAY
    log._appended = 0  # the next append runs the retention pass
    log.append(entry(question="later"))
    assert [e["at"] for e in log.entries()] == [31 * DAY]


def test_grounded_audit_writes_json_lines(tmp_path):
    log = AuditLog(tmp_path, AuditConfig())
    log.append(entry())
    log.append(entry(tenant="globex"))
    result = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "audit", "--tenant", "acme"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["tenant"], e["cited"]) for e in lines] == [("acme", ["doc-a"])]
    bad = CliRunner().invoke(app, ["--data-dir", str(tmp_path), "audit", "--since", "yesterday"])
    assert bad.exit_code != 0


def test_an_acknowledged_entry_survives_a_sigkill(tmp_path):
    """A writer prints each entry's number once append() returned; it is killed mid-stream.
    Every number it printed is in the trail."""
    script = textwrap.dedent(f"""
        import sys
        from serve.identity.audit import AuditConfig, AuditEntry, AuditLog
        log = AuditLog({str(tmp_path)!r}, AuditConfig())
        for n in range(100_000):
            log.append(AuditEntry("acme", "key:k", "k", (), "chat.completions", str(n)))
            print(n, flush=True)
    """)
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=os.getcwd())  # fmt: skip
    acknowledged = -1
    for line in writer.stdout:
        acknowledged = int(line)
        if acknowledged >= 150:
            break
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    stored = {int(e["question"]) for e in AuditLog(tmp_path, AuditConfig()).entries()}
    assert set(range(acknowledged + 1)) <= stored
