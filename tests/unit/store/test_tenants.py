import pytest

from index.errors import InvalidTenantError
from index.store.tenants import TenantDirectory, validate_tenant

pytestmark = pytest.mark.unit

HOSTILE = [
    "../other", "..", ".", "a/../../etc", "/etc/passwd", "acme/../globex", "a\\b", "",
    "Acme", "a" * 64, "acme\x00", "acme ", " acme", "-acme", "ac me", "acmé", "globex/",
    "%2e%2e", "~root", "acme\n",
]  # fmt: skip


@pytest.mark.parametrize("tenant", HOSTILE)
def test_hostile_tenant_ids_are_refused(tenant, tmp_path):
    with pytest.raises(InvalidTenantError, match="invalid tenant id"):
        validate_tenant(tenant)
    with pytest.raises(InvalidTenantError):
        TenantDirectory(tmp_path).path_for(tenant)


@pytest.mark.parametrize("tenant", ["acme", "globex-eu", "t_1", "0", "a" * 63])
def test_valid_tenant_ids_map_inside_the_data_directory(tenant, tmp_path):
    path = TenantDirectory(tmp_path).path_for(tenant)
    assert path.parent == (tmp_path / "tenants").resolve()
    assert path.name == tenant


def test_tenants_lists_only_valid_directories(tmp_path):
    directory = TenantDirectory(tmp_path)
    for name in ("acme", "globex", "Not-Valid", ".hidden"):
        (tmp_path / "tenants" / name).mkdir(parents=True)
    assert directory.tenants() == ["acme", "globex"]
