"""`grounded sources`: declare a folder, run it, list it, remove it; what a mistake says."""

import functools
import json
import sqlite3

import pytest
from typer.testing import CliRunner

from index.service import IndexService
from index.testing import HashingEmbedder
from serve.cli import app, common

pytestmark = pytest.mark.unit


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(
        common, "IndexService", functools.partial(IndexService, embedder=HashingEmbedder())
    )
    return tmp_path / "data"


def grounded(data_dir, *args: str, code: int = 0):
    result = CliRunner().invoke(app, ["--data-dir", str(data_dir), *args])
    assert result.exit_code == code, result.output
    return result


def test_a_folder_declared_run_listed_and_removed(data_dir, tmp_path):
    share = tmp_path / "share"
    (share / "hr").mkdir(parents=True)
    (share / "hr" / "pay.md").write_text("# Pay\n\nPay day is the 25th.")
    (share / "leave.md").write_text("# Leave\n\nAnnual leave is 27 days.")
    added = grounded(data_dir, "sources", "add", "-t", "acme", "--name", "share",
                     f"folder:{share}", "--rule", "hr/**=group:hr", "--every", "10m")  # fmt: skip
    assert "grounded sources sync --tenant acme share" in added.output
    ran = grounded(data_dir, "sources", "sync", "-t", "acme", "share", "--json")
    assert json.loads(ran.stdout)["added"] == 2
    listed = json.loads(grounded(data_dir, "sources", "list", "-t", "acme", "--json").stdout)
    assert listed[0]["files"] == 2 and listed[0]["every_s"] == 600
    assert listed[0]["last_run"]["added"] == 2 and listed[0]["running"] is False
    assert listed[0]["next_run_at"] == listed[0]["last_run"]["finished_at"] + 600
    table = grounded(data_dir, "sources", "list", "-t", "acme").output
    assert "2 added in" in table and "next run" in table
    docs = json.loads(grounded(data_dir, "docs", "-t", "acme", "--json").stdout)
    assert {d["file_name"]: d["access"] for d in docs["documents"]} == {
        "pay.md": ["group:hr"], "leave.md": None}  # fmt: skip
    (share / "new.md").write_text("# New\n\nA new file.")
    watched = grounded(data_dir, "sources", "watch", "-t", "acme", "--once")
    assert watched.output == ""  # it ran a moment ago, every 10 minutes: not due
    [source] = json.loads(grounded(data_dir, "sources", "list", "-t", "acme", "--json").stdout)
    source["last_run"]["finished_at"] -= 601  # as if it had run over 10 minutes ago
    with sqlite3.connect(data_dir / "tenants" / "acme" / "shard.sqlite3") as db:
        db.execute("UPDATE sources SET last_run = ?", (json.dumps(source["last_run"]),))
    assert "1 added" in grounded(data_dir, "sources", "watch", "-t", "acme", "--once").output
    assert "3 documents deleted" in grounded(data_dir, "sources", "remove", "-t", "acme",
                                             "share").output  # fmt: skip
    assert json.loads(grounded(data_dir, "docs", "-t", "acme", "--json").stdout)["documents"] == []


def test_mistakes_are_named(data_dir, tmp_path, monkeypatch):
    missing = grounded(data_dir, "sources", "add", "-t", "acme", "--name", "x",
                       f"folder:{tmp_path / 'nowhere'}", code=1)  # fmt: skip
    assert "is not there" in missing.output
    assert "kind:location" in grounded(data_dir, "sources", "add", "-t", "acme", "--name", "x",
                                       str(tmp_path), code=1).output  # fmt: skip
    unreachable = grounded(data_dir, "sources", "add", "-t", "acme", "--name", "x",
                           "webdav:https://nowhere.invalid/dav", code=1).output  # fmt: skip
    assert "cannot list https://nowhere.invalid/dav" in unreachable
    assert "ftp, " not in grounded(data_dir, "sources", "add", "-t", "acme", "--name", "x",
                                   "ftp://host/x", code=1).output  # fmt: skip
    assert "folder, webdav, s3" in grounded(data_dir, "sources", "add", "-t", "acme", "--name",
                                            "x", "ftp://host/x", code=1).output  # fmt: skip
    assert "only folder sources" in grounded(
        data_dir, "sources", "add", "-t", "acme", "--name", "x", "s3:bucket/docs",
        "--access-from", "posix", code=1,
    ).output  # fmt: skip
    assert "lowercase" in grounded(data_dir, "sources", "add", "-t", "acme", "--name", "X Y",
                                   f"folder:{tmp_path}", code=1).output  # fmt: skip
    assert "10m" in grounded(data_dir, "sources", "add", "-t", "acme", "--name", "x",
                             f"folder:{tmp_path}", "--every", "often", code=1).output  # fmt: skip
    (tmp_path / "rel").mkdir()
    monkeypatch.chdir(tmp_path)
    grounded(data_dir, "sources", "add", "-t", "acme", "--name", "rel", "folder:rel")
    assert json.loads(grounded(data_dir, "sources", "list", "-t", "acme", "--json").stdout)[0][
        "location"] == str(tmp_path / "rel")  # fmt: skip
    assert "no source 'nope'" in grounded(data_dir, "sources", "sync", "-t", "acme", "nope",
                                          code=1).output  # fmt: skip
