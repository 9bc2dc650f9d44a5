"""`grounded ask` and `grounded eval` as an identity (--user, --groups): what they may read."""

import pytest

from index.access import may_read
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
    readable_by = _as_identity(user, groups).search_filter.readable_by
    assert readable_by == readers
    assert may_read(frozenset({"group:support"}), readable_by) == ("group:support" in readers)
