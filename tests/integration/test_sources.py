"""Sources of every kind kept in step, each through its real protocol: a folder, a WebDAV
server (wsgidav, basic authentication) and an S3 server (moto's), each a process of its own
(tests/file_servers.py). The same changes are made at each source (add, edit, delete, rename,
a move between access areas and back) and after one run each time, the tenant's documents,
access lists and searches are the source's as it is now: a revoked reader finds nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import boto3
import pytest

from index.access import Reader
from index.sources import state
from index.sources.kinds import SourceUnreachableError, parse_location
from index.sources.rules import AccessRules
from index.sources.state import Declared
from index.sources.sync import SourceShrankError, sync
from serve.query.retrieval import SearchFilter, SearchParams, search_tenant
from tests.file_servers import (
    S3_KEY_ID,
    S3_SECRET,
    WEBDAV_PASSWORD,
    WEBDAV_USER,
    s3_server,
    webdav_server,
)

pytestmark = pytest.mark.integration
TENANT = "acme"
HR = Reader("user:hana", frozenset({"user:hana", "group:hr"}))
ENG = Reader("user:eli", frozenset({"user:eli", "group:eng"}))


class Folder:
    """A folder changed on disk (a local path, or what the WebDAV server serves)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def put(self, path: str, text: str) -> None:
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)

    def remove(self, path: str) -> None:
        (self.root / path).unlink()

    def move(self, old: str, new: str) -> None:
        (self.root / new).parent.mkdir(parents=True, exist_ok=True)
        shutil.move(self.root / old, self.root / new)


class Bucket:
    """An S3 bucket changed through the S3 protocol, below a prefix."""

    def __init__(self, endpoint: str, bucket: str, prefix: str) -> None:
        self.client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1",
                                   aws_access_key_id=S3_KEY_ID,
                                   aws_secret_access_key=S3_SECRET)  # fmt: skip
        self.bucket, self.prefix = bucket, prefix
        self.client.create_bucket(Bucket=bucket)

    def put(self, path: str, text: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self.prefix + path, Body=text.encode())

    def remove(self, path: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.prefix + path)

    def move(self, old: str, new: str) -> None:
        copied = {"Bucket": self.bucket, "Key": self.prefix + old}
        self.client.copy_object(Bucket=self.bucket, Key=self.prefix + new, CopySource=copied)
        self.remove(old)


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(WebDAV URL, the folder it serves, S3 endpoint), started once for the module."""
    scratch = tmp_path_factory.mktemp("servers")
    served = scratch / "served"
    served.mkdir()
    with webdav_server(served, scratch) as webdav, s3_server() as s3:
        yield webdav, served, s3


@pytest.fixture(params=["folder", "webdav", "s3"])
def place(request, servers, tmp_path, monkeypatch):
    """(the source's ``kind:location``, what changes it), with its credentials set."""
    webdav, served, s3 = servers
    kind = request.param
    if kind == "folder":
        return f"folder:{tmp_path / 'share'}", Folder(tmp_path / "share")
    if kind == "webdav":
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_USERNAME", WEBDAV_USER)
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_PASSWORD", WEBDAV_PASSWORD)
        folder = served / tmp_path.name  # a folder of the served tree for each test
        folder.mkdir()
        return f"webdav:{webdav}/{tmp_path.name}", Folder(folder)
    monkeypatch.setenv("GROUNDED_SOURCE_SHARE_ACCESS_KEY_ID", S3_KEY_ID)
    monkeypatch.setenv("GROUNDED_SOURCE_SHARE_SECRET_ACCESS_KEY", S3_SECRET)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    bucket = tmp_path.name.lower().replace("_", "-")[-60:].strip("-")
    return f"s3:{s3}/{bucket}/team/docs", Bucket(s3, bucket, "team/docs/")


def found(service, reader: Reader, words: str) -> list[str]:
    params = SearchParams(mode="lexical", search_filter=SearchFilter(readable_by=reader))
    return sorted({hit.file_name for hit, _ in search_tenant(service, TENANT, words, 10, params)})


def test_each_change_at_a_source_of_each_kind_is_the_tenants_after_one_run(place, fake_service):
    spec, at = place
    kind, location = parse_location(spec)
    shard = fake_service.shard(TENANT, create=True)
    rules = AccessRules.parse(None, ["hr/**=group:hr"])
    state.add(shard, Declared("share", kind, location, rules))

    def run(**kwargs):
        return sync(shard, fake_service.pipeline(TENANT), state.get(shard, "share"), **kwargs)

    def docs() -> dict[str, tuple | None]:
        return {d.file_name: d.access for d in shard.list_documents()}

    at.put("hr/salaries.md", "# Salaries\n\nThe salary review is in March.")
    at.put("public/leave.md", "# Leave\n\nAnnual leave is twentyseven days.")
    at.put("public/travel.md", "# Travel\n\nTrains are booked in second class.")
    at.put("public/.hidden.md", "# Hidden\n\nNever listed.")
    first = run()
    assert (first.added, first.failed, first.error) == (3, 0, None)
    assert docs() == {"salaries.md": ("group:hr",), "leave.md": None, "travel.md": None}
    assert found(fake_service, HR, "salary review") == ["salaries.md"]
    assert found(fake_service, ENG, "salary review") == []
    assert run().unchanged == 3  # nothing changed: nothing done

    at.put("public/leave.md", "# Leave\n\nAnnual leave is thirty days, from January.")
    edited = run()
    assert (edited.changed, edited.unchanged) == (1, 2)
    assert found(fake_service, ENG, "thirty days") == ["leave.md"]
    assert found(fake_service, ENG, "twentyseven") == []
    if kind != "webdav":  # wsgidav's ETag is inode, size and mtime in whole seconds
        at.put("public/leave.md", "# Leave\n\nAnnual leave is twenty days, from January.")
        assert run().changed == 1, "an edit of the same size, within the second: its ETag"
        assert found(fake_service, ENG, "twenty days") == ["leave.md"]

    travel = {d.file_name: d.doc_id for d in shard.list_documents()}["travel.md"]
    at.move("public/travel.md", "public/trips.md")  # a rename keeps its document
    renamed = run()
    assert (renamed.moved, renamed.added, renamed.deleted) == (1, 0, 0)
    assert {d.file_name: d.doc_id for d in shard.list_documents()}["trips.md"] == travel

    at.move("hr/salaries.md", "public/salaries.md")  # out of HR: the tenant's
    run()
    assert docs()["salaries.md"] is None and found(fake_service, ENG, "salary review")
    at.move("public/salaries.md", "hr/salaries.md")  # back: revoked for the engineer
    back = run()
    assert back.moved == 1 and docs()["salaries.md"] == ("group:hr",)
    assert found(fake_service, ENG, "salary review") == []
    assert found(fake_service, HR, "salary review") == ["salaries.md"]

    at.remove("public/leave.md")
    gone = run()
    assert gone.deleted == 1 and "leave.md" not in docs()
    assert found(fake_service, HR, "annual leave") == []

    for path in ("hr/salaries.md", "public/trips.md"):  # emptied: the guard stops the run
        at.remove(path)
    with pytest.raises(SourceShrankError):
        run()
    assert set(docs()) == {"salaries.md", "trips.md"}
    assert run(confirm_deletes=True).deleted == 2 and docs() == {}


@pytest.mark.parametrize("kind", ["webdav", "s3"])
def test_a_remote_source_refusing_its_credentials_changes_nothing(kind, servers, monkeypatch):
    webdav, _, s3 = servers
    if kind == "webdav":
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_USERNAME", WEBDAV_USER)
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_PASSWORD", "not-the-password")
        location, secret = webdav, "not-the-password"
    else:
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_ACCESS_KEY_ID", S3_KEY_ID)
        monkeypatch.setenv("GROUNDED_SOURCE_SHARE_SECRET_ACCESS_KEY", S3_SECRET)
        monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        location, secret = f"{s3}/no-such-bucket/docs", S3_SECRET
    source = Declared("share", kind, location, AccessRules()).source()
    with pytest.raises(SourceUnreachableError) as refused:
        list(source.entries())
    assert refused.value.status == 503 and secret not in refused.value.message
    assert ("credentials refused" if kind == "webdav" else "NoSuchBucket") in refused.value.message


def test_an_s3_endpoint_without_a_bucket_is_a_clear_400():
    with pytest.raises(Exception, match="name the bucket") as refused:
        parse_location("s3:https://minio.example.com:9000/")
    assert refused.value.status == 400


def test_credentials_in_a_url_are_refused_before_anything_is_stored():
    with pytest.raises(Exception, match="credentials do not go in the URL") as refused:
        parse_location("webdav:https://ana:hunter2@cloud.example.com/dav")
    assert "hunter2" not in str(refused.value)
