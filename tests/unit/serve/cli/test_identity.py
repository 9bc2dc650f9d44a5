"""`grounded ask` and `grounded eval` as an identity (--user, --groups): what they may read."""

import pytest

from serve.cli.answers import _as_identity

pytestmark = pytest.mark.unit


def test_the_operator_reads_every_document():
    assert _as_identity(None, None).search_filter is None


@pytest.mark.parametrize(("user", "groups", "readers"), [
    ("otto", "sales", {"user:otto", "group:sales"}),
    ("otto", " sales, support ,", {"user:otto", "group:sales", "group:support"}),
    (None, "support", {"group:support"}),
    ("otto", None, {"user:otto"}),
])  # fmt: skip
def test_an_identity_reads_as_its_user_and_groups(user, groups, readers):
    reader = _as_identity(user, groups).search_filter.readable_by
    assert reader.principals == readers and not reader.admin
    assert reader.may_read(("group:support",)) == ("group:support" in readers)
