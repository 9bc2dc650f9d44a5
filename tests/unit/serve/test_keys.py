import json
import stat

import pytest

from index.errors import (
    AuthenticationError,
    InvalidRequestError,
    InvalidTenantError,
    PermissionDeniedError,
)
from serve.identity.keys import KeyStore

pytestmark = pytest.mark.unit


def test_a_created_key_authenticates_to_its_tenant_and_only_its_hash_is_stored(tmp_path):
    store = KeyStore(tmp_path)
    key, secret = store.create("acme", ["query"], name="ci")
    found = store.authenticate(f"Bearer {secret}")
    assert found.id == key.id and found.tenant == "acme" and found.scopes == ("query",)
    store.close()
    stored = (tmp_path / "keys.sqlite").read_bytes()
    assert secret.encode() not in stored and key.sha256.encode() in stored
    assert stat.S_IMODE((tmp_path / "keys.sqlite").stat().st_mode) == 0o600


def test_the_key_file_of_earlier_versions_is_imported_once_and_kept(tmp_path):
    """A data directory with keys.json: its keys authenticate from keys.sqlite; the file is
    renamed keys.json.imported, never read again (a key revoked later stays revoked)."""
    old = KeyStore(tmp_path / "old")
    (key, secret), (gone, _) = old.create("acme", ["query"], name="ci"), old.create("acme")
    old.revoke(gone.id)
    with old.db.read() as db:
        rows = [json.loads(body) for (body,) in db.execute("SELECT body FROM api_keys")]
    (tmp_path / "keys.json").write_text(json.dumps({"keys": rows}))
    store = KeyStore(tmp_path)
    assert store.authenticate(f"Bearer {secret}") == key
    assert {k.id: k.active for k in store.list()} == {key.id: True, gone.id: False}
    assert not (tmp_path / "keys.json").exists() and (tmp_path / "keys.json.imported").exists()
    store.revoke(key.id)
    with pytest.raises(AuthenticationError):
        KeyStore(tmp_path).authenticate(f"Bearer {secret}")


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer   ", "Basic abc", "gk-abc"])
def test_missing_or_malformed_headers_are_401(tmp_path, header):
    with pytest.raises(AuthenticationError, match="missing API key") as refused:
        KeyStore(tmp_path).authenticate(header)
    assert refused.value.status == 401


def test_unknown_and_revoked_keys_are_401(tmp_path):
    store = KeyStore(tmp_path)
    key, secret = store.create("acme")
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        store.authenticate("Bearer gk-not-a-key")
    other = KeyStore(tmp_path)  # e.g. the CLI, while the appliance keeps its own store
    assert other.revoke(key.id).revoked_at is not None
    with pytest.raises(AuthenticationError, match="unknown or revoked"):
        store.authenticate(f"Bearer {secret}")  # the running store sees the file change


def test_scopes_are_checked_and_validated(tmp_path):
    store = KeyStore(tmp_path)
    key, _ = store.create("acme", ["query"])
    key.require("query")
    with pytest.raises(PermissionDeniedError, match="needs 'ingest'"):
        key.require("ingest")
    admin, _ = store.create("acme", ["admin"])
    admin.require("ingest")
    admin.require("query")
    with pytest.raises(InvalidRequestError, match="unknown scopes"):
        store.create("acme", ["query", "root"])
    with pytest.raises(InvalidTenantError):
        store.create("../etc")
    with pytest.raises(InvalidRequestError, match="no API key with id"):
        store.revoke("key_missing")
    assert [k.id for k in store.list()] == [key.id, admin.id]  # refusals stored nothing
