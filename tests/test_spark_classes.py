"""The Spark driver's class archive (``gossamer.pipeline.classes``): mapped only when it is
there whole, never when turned off; the archive itself is built by ``scripts/setup.sh``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gossamer.pipeline import classes


def test_the_archive_is_mapped_only_when_whole_and_not_turned_off(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    monkeypatch.delenv(classes.ARCHIVE_ENV, raising=False)
    archive = classes.archive_path()
    assert archive.is_relative_to(tmp_path) and classes.java_options() == ""  # none built
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"x" * 100)
    assert classes.java_options() == ""  # no size recorded: perhaps still being written
    archive.with_suffix(".size").write_text("99")
    assert classes.java_options() == ""  # not the size recorded: a truncated file
    archive.with_suffix(".size").write_text("100")
    assert classes.java_options() == (f"-XX:SharedArchiveFile={archive} -Xshare:auto "
                                      f"-Xlog:cds*=off")
    monkeypatch.setenv(classes.ARCHIVE_ENV, "off")
    assert classes.java_options() == ""


def test_the_archive_is_named_after_the_java_binary(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "a"))
    first = classes.archive_path()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "b"))
    assert classes.archive_path() != first
