"""The suite's one way to wait: for the event, with a ceiling whose failure says what it
waited for and what it saw last (ego_assets_tests/waiting.py)."""

from __future__ import annotations

import itertools

import pytest

from ego_assets_tests.waiting import CEILING_S, wait_for


def test_wait_for_returns_the_awaited_value_as_soon_as_it_is_there() -> None:
    polls = itertools.count(1)
    answers = {1: None, 2: False, 3: "run r1 SUCCESS"}
    value = wait_for("run r1", lambda: answers.get(next(polls), "late"), interval_s=0.0)
    assert value == "run r1 SUCCESS" and next(polls) == 4


def test_a_reached_ceiling_names_what_was_awaited_and_the_last_state() -> None:
    with pytest.raises(pytest.fail.Exception) as failure:
        wait_for("run r1 to finish", lambda: None, ceiling_s=0.0, state=lambda: "STARTED")
    message = str(failure.value)
    assert message.startswith("waited 0 s (ceiling 0 s) for run r1 to finish")
    assert message.endswith("last seen: STARTED")


def test_the_default_ceiling_is_generous() -> None:
    assert CEILING_S >= 600
