"""Every module under ``gossamer.protocols`` imports on its own, as the first import of a fresh
interpreter: the ordering and dissemination layers speak seed 000's wire format, and the replica
face re-exports their seed-000 parts, so an eager import in the wrong place is a cycle."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import gossamer.protocols

MODULES = sorted(info.name for info in pkgutil.walk_packages(gossamer.protocols.__path__,
                                                             "gossamer.protocols."))


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_first(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_the_replica_face_gives_every_name_it_lists() -> None:
    code = ("import gossamer.protocols.replica as r\n"
            "missing = [n for n in r.__all__ if getattr(r, n, None) is None]\n"
            "assert not missing, missing\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
