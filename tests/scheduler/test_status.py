"""The words the core uses for times: durations and times relative to the cycle (no clock time: the core
reads no clock; the service says clock times, see tests/service/test_api.py)."""

from __future__ import annotations

import pytest

from rackscale.scheduler.status import Code, Reason, Status, duration_words, relative

# (seconds, words): to the nearest unit of the last part shown
DURATIONS = [
    pytest.param(0, "0 s", id="zero"),
    pytest.param(0.4, "0 s", id="under-half-a-second"),
    pytest.param(45, "45 s", id="seconds"),
    pytest.param(59.4, "59 s", id="just-under-a-minute"),
    pytest.param(59.6, "1 min", id="rounds-up-to-a-minute"),
    pytest.param(90, "2 min", id="a-minute-and-a-half-rounds-to-even"),
    pytest.param(12 * 60 + 20, "12 min", id="minutes"),
    pytest.param(3599, "1 h", id="just-under-an-hour"),
    pytest.param(3600, "1 h", id="an-hour"),
    pytest.param(2 * 3600 + 10 * 60, "2 h 10 min", id="hours-and-minutes"),
    pytest.param(23 * 3600 + 59 * 60, "23 h 59 min", id="just-under-a-day"),
    pytest.param(86399, "1 d", id="a-second-short-of-a-day"),
    pytest.param(3 * 86400 + 4 * 3600, "3 d 4 h", id="days-and-hours"),
    pytest.param(10 * 86400, "10 d", id="whole-days"),
    pytest.param(400 * 86400, "400 d", id="beyond-a-year-in-days"),
    pytest.param(-7800, "2 h 10 min", id="the-sign-is-dropped"),
]


@pytest.mark.parametrize(("seconds", "words"), DURATIONS)
def test_durations_read_in_the_largest_units(seconds: float, words: str) -> None:
    assert duration_words(seconds) == words


# (at, now, words)
RELATIVE = [
    pytest.param(1000.0, 1000.0, "now", id="now"),
    pytest.param(1000.3, 1000.0, "now", id="within-half-a-second"),
    pytest.param(1045.0, 1000.0, "in 45 s", id="future-seconds"),
    pytest.param(1000.0 + 12 * 60, 1000.0, "in 12 min", id="future-minutes"),
    pytest.param(1000.0 + 7800, 1000.0, "in 2 h 10 min", id="future-hours"),
    pytest.param(1000.0 + 2 * 86400, 1000.0, "in 2 d", id="future-days"),
    pytest.param(1000.0 - 300, 1000.0, "5 min ago", id="past-minutes"),
    pytest.param(1000.0 - 3 * 3600, 1000.0, "3 h ago", id="past-hours"),
    pytest.param(1000.0 - 86400 - 3600, 1000.0, "1 d 1 h ago", id="past-days"),
]


@pytest.mark.parametrize(("at", "now", "words"), RELATIVE)
def test_times_read_relative_to_now(at: float, now: float, words: str) -> None:
    assert relative(at, now) == words


def test_a_status_says_its_time_the_way_it_is_asked() -> None:
    st = Status(
        Code.WAIT, Reason.RESERVATION, "held for it starting in 5 min; more", "backfill", 300.0, "starting in 5 min"
    )
    assert st.text() == st.message
    assert st.text(lambda at: f"from {at:g}") == "held for it from 300; more"
    plain = Status(Code.WAIT, Reason.RESERVATION, "held for it until running jobs end")
    assert plain.text(lambda at: "never") == plain.message
