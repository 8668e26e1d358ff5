"""The argparse converters every verb shares."""

from __future__ import annotations

import argparse
import math

import pytest

from gossamer.core.argtypes import non_negative_int, port, positive_int, probability, seconds


def test_good_values_pass_through() -> None:
    assert port("0") == 0 and port("65535") == 65535
    assert positive_int("1") == 1 and non_negative_int("0") == 0
    assert probability("0.25") == 0.25 and seconds("1.5") == 1.5 and math.isinf(seconds("inf"))


@pytest.mark.parametrize(("convert", "text"), [
    (port, "-1"), (port, "65536"), (positive_int, "0"), (non_negative_int, "-1"),
    (probability, "1.01"), (probability, "nan"), (seconds, "-0.5"), (seconds, "nan"),
])
def test_bad_values_are_refused_with_a_reason(convert: object, text: str) -> None:
    assert callable(convert)
    with pytest.raises(argparse.ArgumentTypeError, match="must be"):
        convert(text)
