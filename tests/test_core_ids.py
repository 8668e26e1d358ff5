"""Node ids: zero-padded so string order is numeric order; bad ids and indexes are refused."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gossamer.core import ConfigError, check_node_id, node_id, node_ids


def test_node_id_is_zero_padded() -> None:
    assert node_id(7) == "n00007"
    assert node_id(7, width=3, prefix="srv") == "srv007"
    assert node_id(0, width=1) == "n0"


@given(st.lists(st.integers(min_value=0, max_value=99_999), min_size=2, max_size=50))
def test_node_id_string_order_is_numeric_order(indexes: list[int]) -> None:
    ids = {index: node_id(index) for index in indexes}
    assert sorted(ids.values()) == [ids[i] for i in sorted(set(indexes))]


@pytest.mark.parametrize("count", [0, 1, 9, 10, 11, 999, 1000, 1001, 10_000, 12_345])
def test_node_ids_sort_numerically_and_are_unique(count: int) -> None:
    ids = node_ids(count)
    assert len(ids) == count
    assert len(set(ids)) == count
    assert sorted(ids) == ids
    assert all(len(i) == len(ids[0]) for i in ids)


def test_node_ids_width_grows_with_count() -> None:
    assert node_ids(3) == ["n000", "n001", "n002"]
    assert node_ids(1000)[-1] == "n999"
    assert node_ids(1001)[-1] == "n1000"
    assert node_ids(1001)[0] == "n0000"
    assert node_ids(2, prefix="c") == ["c000", "c001"]


@pytest.mark.parametrize("index", [-1, -100])
def test_negative_index_raises(index: int) -> None:
    with pytest.raises(ConfigError):
        node_id(index)


def test_index_too_wide_raises() -> None:
    assert node_id(99_999, width=5) == "n99999"
    with pytest.raises(ConfigError):
        node_id(100_000, width=5)
    with pytest.raises(ConfigError):
        node_id(10, width=1)


def test_negative_count_raises() -> None:
    with pytest.raises(ConfigError):
        node_ids(-1)


@pytest.mark.parametrize("good", ["a", "n00001", "host-1.example:9000", "A_b", "x" * 128])
def test_check_node_id_accepts_valid(good: str) -> None:
    assert check_node_id(good) == good


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x" * 129,
        "-leading-dash",
        "_leading",
        "has space",
        "slash/inside",
        "comma,inside",
        "eq=inside",
        "ünicode",
        "n001\n",  # a trailing newline must not slip past the pattern's end anchor
        "\nn001",
        None,
        7,
        b"n001",
    ],
)
def test_check_node_id_rejects_invalid(bad: object) -> None:
    with pytest.raises(ConfigError):
        check_node_id(bad)


def test_bad_prefix_raises() -> None:
    with pytest.raises(ConfigError):
        node_id(1, prefix="bad prefix")
    with pytest.raises(ConfigError):
        node_ids(2, prefix="-")


def test_config_error_is_value_error() -> None:
    # callers that only know ValueError still catch a bad argument
    with pytest.raises(ValueError):
        node_id(-1)
