"""The ``devices`` specification: :func:`accelkit.accelerator.parse_device_indices` and the cpu plugin's
:meth:`CPUAccelerator.parse_devices`, checked with hypothesis against an independent description of what is
valid."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from accelkit.accelerator import Accelerator, parse_device_indices
from accelkit.errors import ConfigurationError
from accelkit_cpu.accelerator import CPUAccelerator

available_counts = st.integers(min_value=1, max_value=16)


def _rejects(value, available=4, parse=None):
    """Parse ``value`` expecting a ConfigurationError; return its message."""
    parse = parse or (lambda v: parse_device_indices(v, available, "fake"))
    with pytest.raises(ConfigurationError) as info:
        parse(value)
    return str(info.value)


def _names(message: str, value) -> bool:
    return repr(value) in message


# ---------------------------------------------------------------------------------------- valid input
@given(available=available_counts, data=st.data())
def test_int_n_is_the_first_n_devices(available, data):
    n = data.draw(st.integers(min_value=1, max_value=available))
    assert parse_device_indices(n, available, "fake") == list(range(n))
    assert parse_device_indices(str(n), available, "fake") == list(range(n))
    assert parse_device_indices(f"  {n} ", available, "fake") == list(range(n))


@given(available=available_counts, spelling=st.sampled_from([-1, "-1", "auto", "AUTO", " auto "]))
def test_all_devices(available, spelling):
    assert parse_device_indices(spelling, available, "fake") == list(range(available))


@given(available=available_counts, data=st.data())
def test_list_of_distinct_indices_keeps_its_order(available, data):
    indices = data.draw(st.lists(st.integers(0, available - 1), min_size=1, max_size=available, unique=True))
    assert parse_device_indices(indices, available, "fake") == indices
    assert parse_device_indices(tuple(indices), available, "fake") == indices


@given(available=available_counts, data=st.data())
def test_comma_string_is_a_list_of_indices(available, data):
    indices = data.draw(st.lists(st.integers(0, available - 1), min_size=1, max_size=available, unique=True))
    sep = data.draw(st.sampled_from([",", ", ", " , "]))
    text = sep.join(map(str, indices))
    if len(indices) == 1:
        text += ","  # "2," is the index 2, as opposed to "2": the first two devices
    bracketed = data.draw(st.booleans())
    if bracketed:
        text = f"[{text}]"
    assert parse_device_indices(text, available, "fake") == indices


def test_single_index_string_forms():
    assert parse_device_indices("2", 4, "fake") == [0, 1]  # a count
    assert parse_device_indices("2,", 4, "fake") == [2]  # an index
    assert parse_device_indices("[3]", 4, "fake") == [3]


# ---------------------------------------------------------------------------------------- invalid input
@given(available=available_counts, n=st.integers(max_value=0).filter(lambda n: n != -1))
def test_zero_and_negative_counts_are_rejected(available, n):
    message = _rejects(n, available)
    assert _names(message, n)
    assert "at least 1" in message
    assert _names(_rejects(str(n), available), str(n))


@given(available=available_counts, extra=st.integers(min_value=1, max_value=1000))
def test_more_devices_than_visible_are_rejected(available, extra):
    n = available + extra
    message = _rejects(n, available)
    assert _names(message, n)
    assert f"{available} " in message and "visible" in message


@given(value=st.one_of(st.floats(allow_nan=True), st.booleans(), st.none(), st.complex_numbers(),
                       st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                       st.sets(st.integers(0, 3), max_size=3)))
def test_values_of_the_wrong_type_are_rejected(value):
    message = _rejects(value)
    assert f"devices={value!r}" in message
    assert "'auto'" in message  # says what would work


@given(available=st.integers(2, 16), data=st.data())
def test_duplicate_indices_are_rejected(available, data):
    indices = data.draw(st.lists(st.integers(0, available - 1), min_size=1, max_size=5))
    twice = indices + [indices[0]]
    message = _rejects(twice, available)
    assert _names(message, twice)
    assert "twice" in message
    assert _names(_rejects(",".join(map(str, twice)), available), ",".join(map(str, twice)))


@given(available=available_counts, data=st.data())
def test_out_of_range_indices_are_rejected(available, data):
    bad = data.draw(st.one_of(st.integers(min_value=available, max_value=available + 100),
                              st.integers(max_value=-1)))
    good = data.draw(st.lists(st.integers(0, available - 1), max_size=3, unique=True))
    indices = good + [bad]
    message = _rejects(indices, available)
    assert _names(message, indices)
    assert f"index {bad} does not exist" in message
    assert str(list(range(available))) in message  # the indices that would work


@pytest.mark.parametrize("value", [[], (), "[]", ",", " , ", ""])
def test_empty_specifications_are_rejected(value):
    assert _names(_rejects(value), value)


@pytest.mark.parametrize("value", [[0, True], [0, 1.0], ["0", 1], [None]])
def test_lists_must_hold_integers(value):
    message = _rejects(value)
    assert _names(message, value)
    assert "integer" in message


def _is_valid_spelling(text: str) -> bool:
    """What the grammar accepts: an ASCII integer, 'auto', or comma-separated ASCII integers (brackets allowed)."""
    import re

    t = text.strip().lower()
    if t == "auto" or re.fullmatch(r"[+-]?[0-9]+", t):
        return True
    bracketed = t.startswith("[") and t.endswith("]")
    inner = t[1:-1] if bracketed else t
    return ("," in t or bracketed) and bool(re.fullmatch(r"\s*[+-]?[0-9]+\s*(,\s*[+-]?[0-9]+\s*)*,?\s*", inner))


@given(text=st.text(max_size=12))
def test_garbage_strings_are_rejected_naming_the_value(text):
    assume(not _is_valid_spelling(text))
    message = _rejects(text, available=64)
    assert _names(message, text)


@pytest.mark.parametrize("text", ["1_0", "٣", "0x2", "1e1", "2.0", "two", "gpu", "0;1", "0 1", "[0,1", "0,1]", "1..2",
                                  "1,,2", ",1", "[[1]]"])
def test_lookalike_strings_are_rejected(text):
    message = _rejects(text, available=64)
    assert _names(message, text)


def test_no_visible_device_for_all():
    message = _rejects("auto", available=0)
    assert "none is visible" in message and "'auto'" in message


def test_base_accelerator_parse_devices_uses_its_device_count():
    class Three(Accelerator):
        name = "three"

        @classmethod
        def device_count(cls):
            return 3

    assert Three.parse_devices("auto") == [0, 1, 2]
    assert Three.parse_devices([2, 0]) == [2, 0]
    message = str(pytest.raises(ConfigurationError, Three.parse_devices, 4).value)
    assert "three" in message and "3 are visible" in message


# ---------------------------------------------------------------------------------------- cpu plugin
@pytest.mark.filterwarnings("ignore:devices=.* processes on .* CPU core")  # tested in plugins/cpu/tests
@given(n=st.integers(min_value=1, max_value=512))
def test_cpu_devices_is_a_process_count(n):
    assert CPUAccelerator.parse_devices(n) == list(range(n))
    assert CPUAccelerator.parse_devices(str(n)) == list(range(n))
    assert CPUAccelerator.parse_devices(f" {n} ") == list(range(n))


@pytest.mark.parametrize("spelling", ["auto", "AUTO", " auto"])
def test_cpu_auto_is_one_process(spelling):
    assert CPUAccelerator.parse_devices(spelling) == [0]


@given(value=st.one_of(
    st.integers(max_value=0),
    st.booleans(), st.none(), st.floats(),
    st.lists(st.integers(0, 3), max_size=3),
    st.text(max_size=8).filter(lambda t: not t.strip().isdigit() and t.strip().lower() != "auto"),
))
def test_cpu_rejects_everything_else_naming_the_value(value):
    message = _rejects(value, parse=CPUAccelerator.parse_devices)
    assert _names(message, value)
    assert "cpu" in message and "devices=2" in message  # says what would work


@pytest.mark.parametrize("text", ["0", " 0 ", "00", "\u0663"])
def test_cpu_rejects_zero_spelt_as_a_string_naming_what_was_written(text):
    assert _names(_rejects(text, parse=CPUAccelerator.parse_devices), text)


@pytest.mark.parametrize("text", ["-1", "-3", "1.5", "[1]", "1,2"])
def test_cpu_rejects_spelt_as_a_string_naming_what_was_written(text):
    assert _names(_rejects(text, parse=CPUAccelerator.parse_devices), text)


def test_hypothesis_examples_have_no_wall_clock_deadline():
    # the suite's profile (conftest.py): a deadline fails correct tests on a loaded machine
    assert settings().deadline is None
