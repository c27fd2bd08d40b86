"""Every number set by an environment variable is read one way: unset gives the default, a bad value is an
error that names the variable and the fix (never a silent fallback)."""

from __future__ import annotations

import pytest

from explorer import budget
from explorer.cache import megabytes_setting
from explorer.settings import SettingError, whole_number
from explorer_app import limits


def test_unset_or_blank_gives_the_default_and_a_number_is_read(monkeypatch):
    monkeypatch.delenv("EXPLORER_TEST_N", raising=False)
    assert whole_number("EXPLORER_TEST_N", 7, "test") == 7
    monkeypatch.setenv("EXPLORER_TEST_N", "  ")
    assert whole_number("EXPLORER_TEST_N", 7, "test") == 7
    monkeypatch.setenv("EXPLORER_TEST_N", " 12 ")
    assert whole_number("EXPLORER_TEST_N", 7, "test") == 12


# one variable of each reader: the data cache, the run budget, the server's limits
READERS = {
    "EXPLORER_DATA_CACHE_MB": megabytes_setting("EXPLORER_DATA_CACHE_MB"),
    "EXPLORER_MAX_DATA_MB": budget.caps,
    "EXPLORER_MAX_JOBS": limits.limits,
}


@pytest.mark.parametrize("variable", list(READERS))
@pytest.mark.parametrize("value", ["abc", "1.5", "-3", "x" * 5000])
def test_a_bad_value_is_refused_naming_the_variable_and_the_fix(variable, value, monkeypatch):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingError) as refused:
        READERS[variable]()
    assert refused.value.path == variable
    assert "is not valid" in refused.value.message and "unset it" in refused.value.message
    assert len(str(refused.value)) < 300  # a long value is cut, not echoed whole


def test_a_cache_may_be_set_to_zero_and_a_cap_may_not(monkeypatch):
    monkeypatch.setenv("EXPLORER_DATA_CACHE_MB", "0")
    assert READERS["EXPLORER_DATA_CACHE_MB"]() == 0
    monkeypatch.setenv("EXPLORER_MAX_DATA_MB", "0")
    with pytest.raises(SettingError, match="positive whole number"):
        budget.caps()
