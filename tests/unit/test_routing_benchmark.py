"""The routing benchmark's cascades on a recorded answer's confidence and check (benchmarks/
routing.py)."""

from __future__ import annotations

import pytest

from benchmarks.routing import (
    LARGE_SUPPORT,
    SHIPPED,
    answers_agree,
    apply,
    at_least_one,
    choose_check,
    choose_logistic,
    not_found_separation,
    paired_interval,
    policy_outcome,
    route_config,
    sweep,
    with_confidence,
    with_sample,
)

pytestmark = pytest.mark.unit


def test_an_unsure_small_answer_cascades_and_a_sure_one_stands():
    small = {"scores": [5.0], "answerable": True, "question": "How many days of leave?",
             "matched": True, "abstained": False, "support": 0.9, "confidence": -2.0,
             "timings": {"generate": 1.0}}  # fmt: skip
    large = {**small, "confidence": None, "matched": False, "timings": {"generate": 3.0}}
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False}
    assert policy_outcome(small, large, {**policy, "min_confidence": -2.5})[2] == "small"
    unsure = policy_outcome(small, large, {**policy, "min_confidence": -1.0})
    assert unsure == (False, 4.0, "cascade")  # the large model's answer, both models' time
    assert policy_outcome(small, large, policy)[2] == "small"  # no threshold: no cascade


def test_confidence_joins_only_the_same_answer():
    rows = {"q1": {"answer": "27 days"}, "q2": {"answer": "Sucre"}}
    said = [['"answer": "', [-0.5]], ['27 days"}', [-1.0]]]
    recorded = {"q1": {"answer": "27 days", "tokens": said},
                "q2": {"answer": "La Paz", "tokens": said}}  # fmt: skip
    joined = with_confidence(rows, recorded)
    assert joined["q1"]["confidence"] == -1.0 and "confidence" not in joined["q2"]


def test_a_recorded_reply_whose_figures_are_not_its_quotes_cascades_with_quote_figures():
    reply = '{"source": 1, "quote": "Leave is 27 days.", "answer": "39 days"}'
    rows = {"q1": {"answer": "39 days [1]"}, "q2": {"answer": "27 days [1]"}}
    recorded = {"q1": {"answer": "39 days [1]", "tokens": [[reply, [-0.1]]]},
                "q2": {"answer": "27 days [1]",
                       "tokens": [[reply.replace("39", "27"), [-0.1]]]}}  # fmt: skip
    joined = with_confidence(rows, recorded)
    assert joined["q1"]["figures_disagree"] and not joined["q2"]["figures_disagree"]
    small = {**joined["q1"], "scores": [5.0], "answerable": True, "matched": False,
             "question": "How many days of leave?", "abstained": False, "support": 0.9,
             "timings": {"generate": 1.0}}  # fmt: skip
    large = {**small, "matched": True, "timings": {"generate": 3.0}}
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False}
    assert policy_outcome(small, large, {**policy, "quote_figures": True})[2] == "cascade"
    assert policy_outcome(small, large, policy)[2] == "small"


def test_a_narrowly_checked_small_answer_cascades_under_min_check():
    small = {"scores": [5.0], "answerable": True, "question": "How many days of leave?",
             "matched": False, "abstained": False, "support": 0.7, "timings": {"generate": 1.0},
             "language": "en"}  # fmt: skip
    large = {**small, "matched": True, "support": 0.9, "timings": {"generate": 3.0}}
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False}
    assert policy_outcome(small, large, {**policy, "min_check": 0.8}) == (True, 4.0, "cascade")
    assert policy_outcome(small, large, {**policy, "min_check": 0.6})[2] == "small"
    assert policy_outcome(small, large, policy) == (False, 1.0, "small")
    # a language's own threshold (min_check_by_language) for its questions only
    french = {**policy, "min_check": 0.6, "min_check_by_language": {"fr": 0.8}}
    assert policy_outcome(small, large, french)[2] == "small"
    assert policy_outcome({**small, "language": "fr"}, large, french)[2] == "cascade"
    # chosen on the pairs: the cut that cascades the wrong answer, within the large share
    assert choose_check([(small, large)], max_large=1.0)["min_check"] > 0.7
    assert choose_check([(small, large)], max_large=0.0)["min_check"] <= 0.7  # cascades none


def test_a_recorded_small_not_found_cascades_only_over_passages_judged_high():
    small = {"scores": [2.5, 1.0], "answerable": True, "question": "How many days of leave?",
             "matched": False, "abstained": True, "support": None,
             "timings": {"generate": 1.0}}  # fmt: skip
    large = {**small, "matched": True, "abstained": False, "support": 0.9,
             "timings": {"generate": 3.0}}  # fmt: skip
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False}
    assert policy_outcome(small, large, policy) == (True, 4.0, "cascade")
    assert policy_outcome(small, large, {**policy, "not_found_min_score": 2.5})[2] == "cascade"
    assert policy_outcome(small, large, {**policy, "not_found_min_score": 3.0}) == (
        False, 1.0, "small")  # fmt: skip
    # a small answer withheld by its check cascades whatever the judge's scores
    checked = {**small, "abstained": False, "support": 0.3}
    assert policy_outcome(checked, large, {**policy, "not_found_min_score": 3.0})[2] == "cascade"
    # the appliance's order (serve/query/routing.py cascades): a kept "not found" stands even
    # when its figures disagree; the report once cascaded it (2 of 341 questions)
    kept = {**policy, "not_found_min_score": 3.0, "quote_figures": True}
    assert policy_outcome({**small, "figures_disagree": True}, large, kept)[2] == "small"


def test_the_judges_best_score_is_read_against_the_not_found_cascades_that_help():
    def pair(score: float, answerable: bool, large_right: bool) -> tuple[dict, dict]:
        small = {"scores": [score, None], "answerable": answerable, "abstained": True,
                 "support": None, "matched": False}  # fmt: skip
        large = {**small, "abstained": not (answerable and large_right), "matched": large_right}
        return small, large

    helps = [pair(6.0, True, True), pair(4.0, True, True)]
    rest = [pair(5.0, False, False), pair(1.0, False, False), pair(0.5, True, False)]
    answered = ({**pair(9.0, True, True)[0], "abstained": False, "support": 0.9}, {})
    assert not_found_separation([*helps, *rest, answered]) == (5, 5 / 6)  # 6 over 5 ranks low


def test_the_logistic_policy_asks_again_where_the_large_check_says_wrong():
    """Fitted on dev answers whose large check separates right from wrong, it names for the
    large model the test answers with a low check and keeps those with a high one."""

    def row(i: int, split: str, matched: bool) -> dict:
        return {"id": f"q{i}", "split": split, "language": "en", "answerable": True,
                "question": "How many days of leave?", "scores": [5.0, 3.0],
                "matched": matched, "abstained": False, "answer": f"a{i}",
                "support": 0.9 if matched else 0.7, "timings": {"generate": 1.0}}  # fmt: skip

    rows = {r["id"]: r for r in [row(i, "dev" if i < 20 else "test", i % 3 != 0)
                                 for i in range(30)]}  # fmt: skip
    small = {i: {**r, "support": 0.5} for i, r in rows.items()}
    large = {i: {**r, "matched": True} for i, r in rows.items()}
    dev = [(rows[i], large[i]) for i in rows if rows[i]["split"] == "dev"]
    policy = choose_logistic(rows, dev, small, max_large=0.5)
    assert policy["escalate"] == {i for i, r in rows.items() if not r["matched"]}


@pytest.mark.parametrize(
    ("first", "second", "agree"),
    [
        ("27 days [1]", "27 days a year [2]", True),  # one within the other
        ("1,450 [2]", "1450 boxes [1]", True),  # the same figure, written two ways
        ("Sucre [1]", "La Paz [1]", False),
        ("9:30 [1]", "10:30 [1]", False),
        ("Not found in the sources.", "27 days [1]", False),
        ("Not found in the sources.", "Not found in the sources.", True),
    ],
)
def test_two_answers_agree_when_they_say_the_same(first, second, agree):
    assert answers_agree(first, second) is agree


def test_a_small_answer_whose_sample_disagrees_cascades_with_disagree():
    small = {"scores": [5.0], "answerable": True, "question": "Bolivia's capital?",
             "matched": False, "abstained": False, "support": 0.9, "answer": "La Paz [1]",
             "timings": {"generate": 1.0}}  # fmt: skip
    large = {**small, "matched": True, "answer": "Sucre [1]", "timings": {"generate": 3.0}}
    [apart] = with_sample({"q": small}, {"q": {"answer": "Sucre [2]"}}).values()
    [same] = with_sample({"q": small}, {"q": {"answer": "La Paz [1]"}}).values()
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False, "disagree": True}
    assert policy_outcome(apart, large, policy) == (True, 4.0, "cascade")
    assert policy_outcome(same, large, policy)[2] == "small"
    assert policy_outcome(apart, large, {**policy, "disagree": False})[2] == "small"


def test_the_likelihood_joins_only_the_same_answer_and_cascades_under_its_threshold():
    from benchmarks.routing import log_odds, with_likelihood

    rows = {"q1": {"answer": "27 days [1]", "support": 0.9},
            "q2": {"answer": "Sucre [2]", "support": 0.9},
            "q3": {"answer": "Not found in the sources.", "support": None}}  # fmt: skip
    scored = {"q1": {"answer": "27 days", "large_min": -6.0},
              "q2": {"answer": "La Paz", "large_min": -1.0},
              "q3": {"answer": "", "large_min": None}}  # fmt: skip
    joined = with_likelihood(rows, scored)
    assert joined["q1"]["likely"] == pytest.approx(log_odds(0.9) - 6.0)
    assert "likely" not in joined["q2"] and "likely" not in joined["q3"]
    small = {"scores": [5.0], "answerable": True, "question": "How many days of leave?",
             "matched": True, "abstained": False, "support": 0.9, "likely": -3.8,
             "timings": {"generate": 1.0}}  # fmt: skip
    large = {**small, "likely": None, "timings": {"generate": 3.0}}
    policy = {"cascade": True, "small_support": LARGE_SUPPORT, "compares": False}
    assert policy_outcome(small, large, {**policy, "min_likely": -4.0})[2] == "small"
    assert policy_outcome(small, large, {**policy, "min_likely": -3.0})[2] == "cascade"


def test_the_paired_interval_brackets_the_difference_to_always_large():
    def row(language: str, small_right: bool, large_right: bool) -> tuple[dict, dict]:
        small = {"scores": [5.0], "answerable": True, "question": "How many days of leave?",
                 "matched": small_right, "abstained": False, "support": 0.9,
                 "language": language, "timings": {"generate": 1.0}}  # fmt: skip
        return small, {**small, "matched": large_right}

    small_only = {"cascade": False, "small_support": LARGE_SUPPORT, "compares": False}
    level = [row(language, True, True) for language in ("en", "fr") for _ in range(10)]
    assert paired_interval(level, small_only, draws=200) == (0.0, 0.0)
    # English: the small model wrong on 5 of 10 where the large one is right; French: level
    worse = [row("en", i >= 5, True) for i in range(10)] + level[10:]
    low, high = paired_interval(worse, small_only, draws=2000)
    assert -0.5 <= low < -0.25 < high <= 0.0  # the mean of the two languages' differences


def test_apply_reads_a_fixed_policy_on_every_recorded_question(tmp_path, capsys):
    """The shipped example on three questions: a well-checked right small answer stands; a
    small answer whose figures are none of its quote's cascades to the large model's; the
    gate answers an unanswerable one "not found" without a generator."""
    import argparse
    import json

    def reply(quote: str, answer: str) -> list:
        return [[json.dumps({"source": 1, "quote": quote, "answer": answer}), [-0.1]]]

    base = {"scores": [5.0], "answerable": True, "abstained": False, "support": 0.95,
            "language": "en", "split": "test", "timings": {"generate": 1.0}}  # fmt: skip
    checked = [
        {**base, "id": "q1", "question": "How many days of leave?", "matched": True,
         "answer": "27 days [1]", "tokens": reply("Leave is 27 days.", "27 days")},
        {**base, "id": "q2", "question": "What does parking cost?", "matched": False,
         "answer": "39 euros [1]", "tokens": reply("Parking costs 52 euros.", "39 euros")},
        {**base, "id": "q3", "question": "Who won in 1998?", "matched": False, "scores": [],
         "answerable": False, "abstained": True, "support": None,
         "answer": "Not found in the sources.", "tokens": []},
    ]  # fmt: skip
    large = [{**row, "matched": True, "timings": {"generate": 3.0}} for row in checked]
    paths = []
    for name, rows in (("checked", checked), ("large", large)):
        paths.append(tmp_path / f"{name}.jsonl")
        paths[-1].write_text("".join(json.dumps(row) + "\n" for row in rows))
    apply(argparse.Namespace(runs=[f"{paths[0]},{paths[1]}"], policy={}, set=None, split=None,
                             sweep=False, max_large=0.5))  # fmt: skip
    shown = capsys.readouterr().out
    assert "| always large | 1.000 |" in shown and "| the policy | 1.000 |" in shown
    assert "| 0.50 | 0.50 |" in shown  # the large model wrote one answer of two, by cascade
    assert "1 cascades; the large model right where the small one was not: 1;" in shown
    assert "0.50 of the generated answers, 0.33 of all questions" in shown


def test_the_sweep_finds_the_best_policy_within_the_cap_of_the_large_models_share(capsys):
    """A right English small answer and a wrong French one whose check (0.82) passes a
    min_check of 0.8: a stricter check (French, or both) sends the French one to the large
    model, right, with the large model on half of the questions; under a cap of 0.4 no policy
    may, and the best trails in French by the whole question."""
    base = {"scores": [5.0], "answerable": True, "abstained": False,
            "timings": {"generate": 1.0}}  # fmt: skip
    english = {**base, "language": "en", "question": "How many days of leave?",
               "matched": True, "support": 0.95}  # fmt: skip
    french = {**base, "language": "fr", "question": "Combien coûte le parking ?",
              "matched": False, "support": 0.82}  # fmt: skip
    pairs = [(row, {**row, "matched": True, "support": 0.9}) for row in (english, french)]
    sweep(pairs, SHIPPED, 0.5)
    lines = capsys.readouterr().out.splitlines()
    best_mean = lines[[line.startswith("best mean") for line in lines].index(True) + 1]
    assert best_mean.startswith("+0.0 | +0.0 | en +0.0, fr +0.0 | 0.50 |"), best_mean
    assert "'min_check': 0.85" in best_mean or "'fr': 0.85" in best_mean, best_mean
    sweep(pairs, SHIPPED, 0.4)
    capped = capsys.readouterr().out
    assert "policies within the cap of 0.4" in capped
    assert "\n-50.0 | -100.0 | en +0.0, fr -100.0 | 0.00 |" in capped
    # two questions more that the gate answers "not found": one large answer of four questions
    gate = {**english, "scores": [], "answerable": False, "abstained": True, "support": None}
    pairs += [(gate, gate), (gate, gate)]
    sweep(pairs, SHIPPED, 0.4, over="all")
    of_all = capsys.readouterr().out
    assert "within the cap of 0.4 (of the questions)" in of_all
    assert "\n+0.0 | +0.0 | en +0.0, fr +0.0 | 0.25 |" in of_all


def test_rescored_reads_the_sets_labels_as_they_are_now(tmp_path, monkeypatch):
    import json

    import benchmarks.routing as routing

    leave = {"id": "new-1", "question": "How many days of leave?", "answer_contains": ["27"],
             "relevant_files": ["handbook.md"]}  # fmt: skip
    mayor = {"id": "new-2", "question": "Who is the mayor?", "answerable": False}
    (tmp_path / "new-en.jsonl").write_text(f"{json.dumps(leave)}\n{json.dumps(mayor)}")
    (tmp_path / "new-fr.jsonl").write_text(json.dumps({"id": "new-fr", "question": "?"}))
    monkeypatch.setattr(
        routing, "question_set", lambda name, lang: tmp_path / f"{name}-{lang}.jsonl"
    )
    recorded = {"new-1": {"answer": "27 days [1]", "abstained": False, "answerable": False,
                          "matched": False},
                "new-2": {"answer": "Not found.", "abstained": True, "answerable": True,
                          "matched": False},
                "new-3": {"answer": "dropped since", "abstained": False},
                "human-en-001": {"answer": "of another set", "matched": True}}  # fmt: skip
    rows = routing.rescored(recorded, "new")
    assert set(rows) == {"new-1", "new-2", "human-en-001"}  # new-3: no longer in the set
    assert rows["new-1"]["answerable"] and rows["new-1"]["matched"]
    assert not rows["new-2"]["answerable"] and not rows["new-2"]["matched"]
    assert rows["human-en-001"] == recorded["human-en-001"]  # another set's, as recorded


def test_the_benchmarks_shipped_policy_is_the_documented_example():
    """benchmarks/routing.py's SHIPPED (what `apply` reads by default) is docs/configuration.md's
    "Several models" route, and the small answers' check threshold is configs/cpu.yaml's."""
    import re

    import yaml

    from benchmarks.routing import SHIPPED
    from tests.conftest import REPO

    section = (REPO / "docs/configuration.md").read_text().split("## Several models", 1)[1]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    route = example["generator"]["route"]
    assert {k: v for k, v in SHIPPED.items() if k in route} == route
    assert set(SHIPPED) - set(route) <= {"cascade", "small_support"}
    assert SHIPPED["cascade"] is route.get("cascade", True)  # on by default
    cpu = yaml.safe_load((REPO / "configs/cpu.yaml").read_text())
    assert SHIPPED["small_support"] == cpu["query"]["min_answer_support"]


def test_timing_refuses_a_bad_route_or_count_before_any_engine_starts():
    """`timing --route` is a RouteConfig checked at parse time; counts are 1 or more."""
    import argparse

    assert route_config('{"min_check": 0.85, "compares": false}').min_check == 0.85
    refused = {
        '{"max_word": 3}': "max_word: Extra inputs",
        "nope": "not JSON",
        "[1]": "give a JSON object",
        '{"min_check": 2}': "min_check: Input should be",
    }
    for text, reason in refused.items():
        with pytest.raises(argparse.ArgumentTypeError, match=reason):
            route_config(text)
    assert at_least_one("24") == 24
    for text in ("0", "-2", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="1 or more"):
            at_least_one(text)
