"""The activity server's relay log on its own: high-water marks, bounded copies, what a side
that received some marks is resent and which gaps no copy can fill."""

from __future__ import annotations

from gossamer.protocols.activity.relay_log import RelayLog


def test_a_side_is_resent_what_it_lacks_and_told_the_gaps_no_copy_fills() -> None:
    log = RelayLog(max_buffer=3, max_origins=2, max_marks=3)
    for n in range(1, 6):  # s1/1 numbers 1..5: the copies of 3, 4 and 5 remain
        log.keep("s1/1", n, b"a%d" % n)
    log.keep("s2/1", 1, b"b1")
    assert (log.last("s1/1"), log.last("s2/1"), log.last("s3/1")) == (5, 1, 0)
    assert list(log.newer_than({"s1/1": 3, "s2/1": 1})) == [b"a4", b"a5"]
    assert list(log.gaps({"s1/1": 3, "s2/1": 1})) == []
    # one that had 1 of s1/1 misses 2, which no copy holds; one that never heard of s2/1 gets it
    assert list(log.newer_than({"s1/1": 1})) == [b"a3", b"a4", b"a5", b"b1"]
    assert list(log.gaps({"s1/1": 1})) == [("s1/1", 1)]


def test_marks_and_copies_are_bounded_least_recently_heard_first() -> None:
    log = RelayLog(max_buffer=2, max_origins=2, max_marks=3)
    log.keep("a", 1, b"a1")
    log.keep("b", 1, b"b1")
    log.keep("c", 1, b"c1")  # a's copies go: two origins at most
    log.mark("d", 7)  # a's mark goes: three marks at most
    assert list(log.frames) == ["b", "c"]
    assert list(log.high_water) == ["b", "c", "d"]
    assert not log.knows("a") and log.knows("d")
