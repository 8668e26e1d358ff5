"""The analysis settings stored with each run, so that analysing it again gives its verdict.

``gossamer experiment`` (and the services' own processes) write ``trace/<run>/analysis.json``
(``gossamer.core.traceio.write_settings``); ``read_run_settings`` reads them back, checked.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.trace import SCHEMA_VERSION
from ..core.traceio import SETTINGS_FILE, write_settings
from .checks import CheckConfig
from .errors import PipelineError

__all__ = ["RunSettings", "read_run_settings", "write_run_settings"]

_KEYS = {"run", "schema_version", "services", "checks", "throughput_bucket", "replay"}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What a run was made to be judged by: its services, the checks' settings, the throughput
    bucket, the trace schema version it was written with and the command that makes it again
    (None: a real deployment, nothing replays it)."""

    checks: CheckConfig = dataclasses.field(default_factory=CheckConfig)
    services: tuple[str, ...] = ()
    throughput_bucket: float = 1.0
    schema_version: int = SCHEMA_VERSION
    replay: str | None = None

    def to_mapping(self) -> dict[str, Any]:
        return {"services": list(self.services), "checks": self.checks.to_mapping(),
                "throughput_bucket": self.throughput_bucket, "replay": self.replay}

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, where: str) -> RunSettings:
        unknown = set(raw) - _KEYS
        if unknown:
            raise PipelineError(f"{where}: unknown keys {sorted(unknown)}")
        version = raw.get("schema_version", 1)
        if not isinstance(version, int) or version < 1:
            raise PipelineError(f"{where}: schema_version must be a positive integer")
        if version > SCHEMA_VERSION:
            raise PipelineError(f"{where}: written for trace schema version {version}; this "
                                f"gossamer reads up to {SCHEMA_VERSION} (upgrade gossamer)")
        services = raw.get("services", [])
        if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
            raise PipelineError(f"{where}: services must be a list of names")
        bucket = raw.get("throughput_bucket", 1.0)
        if isinstance(bucket, bool) or not isinstance(bucket, int | float) or bucket <= 0:
            raise PipelineError(f"{where}: throughput_bucket must be a number > 0")
        replay = raw.get("replay")
        if replay is not None and not isinstance(replay, str):
            raise PipelineError(f"{where}: replay must be a command line or null")
        checks = CheckConfig.from_mapping(raw.get("checks", {}), where=f"{where}: checks")
        return cls(checks=checks, services=tuple(services), throughput_bucket=float(bucket),
                   schema_version=version, replay=replay)


def write_run_settings(run_dir: str | Path, run: str, settings: RunSettings) -> Path:
    """``RUN_DIR/trace/<run>/analysis.json``."""
    return write_settings(run_dir, run, settings.to_mapping())


def read_run_settings(run_dir: str | Path) -> dict[str, RunSettings]:
    """Run id -> the settings stored beside its trace (runs without any are left out); an
    unreadable or invalid file is an error naming it."""
    found: dict[str, RunSettings] = {}
    root = Path(run_dir) / "trace"
    for path in sorted(root.glob(f"*/{SETTINGS_FILE}")) if root.is_dir() else []:
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PipelineError(f"{path}: unreadable analysis settings ({exc})") from exc
        if not isinstance(raw, dict):
            raise PipelineError(f"{path}: analysis settings must be a JSON object")
        run = raw.get("run", path.parent.name)
        if not isinstance(run, str) or not run:
            raise PipelineError(f"{path}: run must be the run id")
        found[run] = RunSettings.from_mapping(raw, where=str(path))
    return found
