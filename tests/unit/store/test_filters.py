import pytest
from openai.types.shared import ComparisonFilter as OpenAIComparison

from index.errors import InvalidRequestError
from index.store.filters import MAX_DEPTH, parse_filter

pytestmark = pytest.mark.unit

ATTRIBUTES = {"team": "hr", "year": 2024, "score": 0.5, "public": True, "label": "2024"}


def cmp(op, key, value):
    return {"type": op, "key": key, "value": value}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (cmp("eq", "team", "hr"), True),
        (cmp("eq", "team", "HR"), False),
        (cmp("eq", "year", 2024.0), True),  # ints and floats are both numbers
        (cmp("eq", "public", True), True),
        (cmp("ne", "team", "eng"), True),
        (cmp("ne", "team", "hr"), False),
        (cmp("gt", "year", 2023), True),
        (cmp("gt", "year", 2024), False),
        (cmp("gte", "year", 2024), True),
        (cmp("lt", "score", 0.75), True),
        (cmp("lt", "score", 0.5), False),
        (cmp("lte", "score", 0.5), True),
        (cmp("in", "team", ["eng", "hr"]), True),
        (cmp("in", "team", ["eng", "ops"]), False),
        (cmp("in", "year", ["2024", 2024]), True),
        (cmp("nin", "team", ["eng", "ops"]), True),
        (cmp("nin", "team", ["hr", "ops"]), False),
    ],
)
def test_each_operator_compares_a_present_attribute_of_the_same_type(raw, expected):
    assert parse_filter(raw).matches(ATTRIBUTES) is expected


@pytest.mark.parametrize(
    "raw",
    [
        cmp("eq", "missing", "x"),
        cmp("ne", "missing", "x"),  # ne means "present and different"
        cmp("nin", "missing", ["x"]),
        cmp("gt", "missing", 0),
        cmp("in", "missing", ["x", 1]),
    ],
)
def test_an_absent_key_never_matches_whatever_the_operator(raw):
    assert parse_filter(raw).matches(ATTRIBUTES) is False


@pytest.mark.parametrize(
    "raw",
    [
        cmp("eq", "year", "2024"),  # a number attribute is not a string
        cmp("eq", "label", 2024),  # a string attribute is not a number
        cmp("ne", "year", "2024"),
        cmp("eq", "public", 1),  # a boolean is never a number
        cmp("gt", "public", 0),
        cmp("gte", "label", 2000),
        cmp("in", "year", ["2024"]),
        cmp("nin", "year", ["1999"]),  # no value of the attribute's type in the list
        cmp("nin", "public", ["x", 0]),
    ],
)
def test_values_of_another_type_never_match_and_nothing_is_coerced(raw):
    assert parse_filter(raw).matches(ATTRIBUTES) is False


def test_compound_filters_nest_and_combine():
    hr_recent = {
        "type": "and",
        "filters": [cmp("eq", "team", "hr"), cmp("gte", "year", 2024)],
    }
    either = {"type": "or", "filters": [cmp("eq", "team", "eng"), hr_recent]}
    assert parse_filter(hr_recent).matches(ATTRIBUTES) is True
    assert parse_filter(either).matches(ATTRIBUTES) is True
    assert parse_filter(either).matches({**ATTRIBUTES, "year": 2020}) is False
    assert parse_filter(either).matches({"team": "eng"}) is True
    with_absent = {"type": "and", "filters": [cmp("eq", "team", "hr"), cmp("eq", "missing", 1)]}
    assert parse_filter(with_absent).matches(ATTRIBUTES) is False


def test_the_openai_packages_own_filter_models_are_accepted():
    parsed = parse_filter(OpenAIComparison(type="eq", key="team", value="hr"))
    assert parsed.matches(ATTRIBUTES) is True


@pytest.mark.parametrize(
    ("raw", "param", "says"),
    [
        (cmp("regex", "team", "h.*"), "filters", "does not match any of the expected tags"),
        ({"type": "eq", "key": "team"}, "filters.value", "Field required"),
        ({**cmp("eq", "team", "hr"), "values": 1}, "filters.values", "Extra inputs"),
        (cmp("eq", "", "hr"), "filters.key", "at least 1 character"),
        (cmp("gt", "label", "2000"), "filters.value", "compares numbers only"),
        (cmp("lt", "public", True), "filters.value", "compares numbers only"),
        (cmp("eq", "team", ["hr"]), "filters.value", "use 'in' or 'nin'"),
        (cmp("eq", "team", None), "filters.value", "single string, number or boolean"),
        (cmp("in", "team", []), "filters.value", "non-empty list"),
        (cmp("in", "team", "hr"), "filters.value", "non-empty list"),
        (cmp("nin", "public", [True]), "filters.value", "strings or numbers"),
        (cmp("eq", "score", float("nan")), "filters.value", "finite"),
        ({"type": "and", "filters": []}, "filters.filters", "at least 1 item"),
        (
            {"type": "or", "filters": [cmp("eq", "team", "hr"), cmp("gt", "team", "x")]},
            "filters.filters[1].value",
            "compares numbers only",
        ),
        ("team = hr", "filters", "valid dictionary"),
    ],
)
def test_malformed_filters_are_refused_with_the_faulty_part_named(raw, param, says):
    with pytest.raises(InvalidRequestError, match=says) as caught:
        parse_filter(raw)
    assert caught.value.param == param
    assert caught.value.status == 400


def test_filters_nested_too_deep_are_refused():
    raw = cmp("eq", "team", "hr")
    for _ in range(MAX_DEPTH - 1):
        raw = {"type": "and", "filters": [raw]}
    assert parse_filter(raw).matches(ATTRIBUTES) is True  # MAX_DEPTH levels: allowed
    with pytest.raises(InvalidRequestError, match=f"at most {MAX_DEPTH}"):
        parse_filter({"type": "or", "filters": [raw]})
