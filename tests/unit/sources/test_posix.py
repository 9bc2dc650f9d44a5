"""A folder's own permissions as its documents' readers (``access_from: posix``): mode bits
and POSIX ACLs set with the real tools (chown, chmod, Debian's setfacl), read back as
principals, and a permission revoked at the source enforced by the next run without reading
the file again."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from index.access import Reader
from index.sources import state
from index.sources.folder import FolderSource
from index.sources.rules import AccessRules
from index.sources.state import Declared
from index.sources.sync import sync
from serve.query.retrieval import SearchFilter, SearchParams, search_tenant

pytestmark = [
    pytest.mark.unit,
    pytest.mark.skipif(os.geteuid() != 0, reason="chown to other ids needs root"),
    pytest.mark.skipif(shutil.which("setfacl") is None, reason="`make setup` installs acl"),
]
OWNER, GROUP, OTHER_USER, OTHER_GROUP = 12345, 23456, 34567, 45678  # ids without names here
NAMES = ["user:uid-12345=user:ana", "group:gid-23456=group:hr"]


def acl(path, *spec: str) -> None:
    subprocess.run(["setfacl", *spec, str(path)], check=True)


def readers_of(path) -> tuple | None:
    (entry,) = FolderSource(path.parent, permissions=True).entries()
    return AccessRules.parse(None, [], posix=True, names=NAMES).access(entry)


def test_owner_group_acl_entries_and_world_become_principals(tmp_path):
    path = tmp_path / "f.md"
    path.write_text("text")
    os.chown(path, OWNER, GROUP)
    path.chmod(0o644)
    assert readers_of(path) is None  # world-readable: the tenant
    path.chmod(0o640)
    assert readers_of(path) == ("group:hr", "user:ana")  # mapped names
    acl(path, "-m", f"u:{OTHER_USER}:r,g:{OTHER_GROUP}:r")
    assert readers_of(path) == ("group:gid-45678", "group:hr", "user:ana", "user:uid-34567")
    acl(path, "-m", "m::---")  # the mask takes read from every named entry and the group
    assert readers_of(path) == ("user:ana",)
    path.chmod(0o000)
    assert readers_of(path) == ()  # nobody: the tenant's admins only


def test_a_permission_revoked_at_the_source_is_enforced_by_the_next_run(fake_service, tmp_path):
    folder = tmp_path / "share"
    folder.mkdir()
    path = folder / "salaries.md"
    path.write_text("# Salaries\n\nThe salary review is in March.")
    os.chown(path, OWNER, GROUP)
    path.chmod(0o644)
    shard = fake_service.shard("acme", create=True)
    rules = AccessRules.parse(None, [], posix=True, names=NAMES)
    state.add(shard, Declared("share", "folder", str(folder), rules))
    hr = Reader("user:hana", frozenset({"user:hana", "group:hr"}))
    eng = Reader("user:eli", frozenset({"user:eli", "group:eng"}))

    def run():
        return sync(shard, fake_service.pipeline("acme"), state.get(shard, "share"))

    def finds(reader: Reader) -> bool:
        params = SearchParams(mode="lexical", search_filter=SearchFilter(readable_by=reader))
        return bool(search_tenant(fake_service, "acme", "salary review", 5, params))

    assert run().added == 1 and finds(eng) and finds(hr)
    path.chmod(0o640)  # the world's read taken away: HR's group and its owner keep it
    revoked = run()
    assert (revoked.access, revoked.changed, revoked.unchanged) == (1, 0, 0)
    assert not finds(eng) and finds(hr)
    assert [d.access for d in shard.list_documents()] == [("group:hr", "user:ana")]
