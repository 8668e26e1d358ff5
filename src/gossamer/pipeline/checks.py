"""Guarantee checks over a trace: pure ``DataFrame -> DataFrame`` transforms yielding violations.

Each ``*_violations`` function takes the trace (with or without ``row``) and its config as
keyword arguments and returns rows ``(run, node, msg, origin, seq, detail)``. A ``Check`` pairs
one of them with the evidence that makes it applicable; ``evaluate`` turns checks into verdicts
(pass, fail, or not applicable with the reason) without collecting any per-event data.

The transforms live by family: ``delivery_checks`` (membership, reliability, own delivery,
duplicates, validity), ``order_checks`` (FIFO, causal order), ``state_checks`` (total order,
convergence), on what ``check_rows`` shares; this module re-exports them.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from .atomic_checks import atomicity_evidence, atomicity_violations
from .check_rows import (
    BASE_COLUMNS,
    VIOLATION_COLUMNS,
    Check,
    info_field,
    layer_filter,
)
from .delivery_checks import (
    duplicate_violations,
    expected_deliveries,
    member_status,
    own_delivery_violations,
    reliability_summary,
    reliability_violations,
    subscription_intervals,
    validity_violations,
)
from .errors import PipelineError
from .order_checks import causal_violations, fifo_violations, vector_column
from .overlap import Overlap
from .paxos_checks import paxos_checks
from .round_checks import ROUND, round_consistency_violations
from .schema import sharing_intermediates, with_row_order
from .state_checks import convergence_violations, object_states, total_order_violations

__all__ = [
    "BASE_COLUMNS",
    "LAYER_LISTS",
    "VIOLATION_COLUMNS",
    "Check",
    "CheckConfig",
    "CheckResult",
    "Status",
    "atomicity_check",
    "causal_check",
    "causal_violations",
    "convergence_check",
    "convergence_violations",
    "default_checks",
    "duplicate_violations",
    "duplicates_check",
    "evaluate",
    "expected_deliveries",
    "fifo_check",
    "fifo_violations",
    "member_status",
    "object_states",
    "own_delivery_check",
    "own_delivery_violations",
    "reliability_check",
    "reliability_summary",
    "reliability_violations",
    "round_consistency_check",
    "subscription_intervals",
    "total_order_check",
    "total_order_violations",
    "validity_check",
    "validity_violations",
]


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    NOT_APPLICABLE = "not applicable"
    #: the check could not be run on this trace (a column it needs is missing)
    ERROR = "error"


# -- checks as verdicts ------------------------------------------------------------------------

#: what a partial analysis does not judge (``validity_violations`` with ``complete`` False)
PARTIAL_NOTE = ("what they held is not judged, and deliveries are not checked against the "
                "publishes, which may be among it")

@dataclasses.dataclass(frozen=True)
class CheckResult:
    name: str
    status: Status
    reason: str
    violation_count: int
    violations: DataFrame | None


LAYER_LISTS = ("layers", "total_order_layers", "fifo_layers", "session_layers",
                "causal_layers", "own_delivery_layers", "round_layers")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckConfig:
    """What the checks assume about a trace: which layers promise what. ``layers`` None: every
    layer. A layer list left None is not declared: its check applies where the trace shows
    what it needs and is "not applicable" elsewhere; a declared layer whose rows lack what the
    check needs is an error."""

    layers: tuple[str, ...] | None = None
    total_order_layers: tuple[str, ...] = ()
    total_order_per_key: bool = False
    revision_field: str = "rev"
    exempt_crashed_origins: bool = False
    #: layers that promise FIFO per origin (None: ``layers``); topic pub/sub does not: a
    #: subscriber sees only its topics' share of an origin's sequence numbers
    fifo_layers: tuple[str, ...] | None = None
    #: layers with sessions (seed 003): a node owes only what was published in its last up
    #: interval, and a FIFO gap across a membership change of the node is no violation
    session_layers: tuple[str, ...] = ()
    #: layers that promise causal order (deliver rows carry ``info.vector``; None: ``layers``,
    #: checked where vectors are traced)
    causal_layers: tuple[str, ...] | None = None
    #: layers in which an origin delivers its own messages (where it owes them: subscribed,
    #: up); None: the layers of ``layers`` in which some origin does, which shows the service
    #: promises it; () none
    own_delivery_layers: tuple[str, ...] | None = None
    #: layers of round-based state sync (seed 002: ``appsync``), judged by round consistency
    round_layers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in LAYER_LISTS:
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, str) or not all(isinstance(v, str) and v for v in value):
                raise PipelineError(f"{name} must be a list of layer names, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.revision_field or not self.revision_field.replace("_", "").isalnum():
            raise PipelineError(f"revision_field must be a plain JSON field name, "
                                f"got {self.revision_field!r}")

    def to_mapping(self) -> dict[str, Any]:
        """The fields as plain JSON/TOML values (``from_mapping`` reads them back)."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, where: str = "[analysis]") -> CheckConfig:
        """A config from a table (an experiment's ``[analysis]``, stored settings); unknown
        keys and values of the wrong kind are errors naming ``where``."""
        if not isinstance(raw, Mapping):
            raise PipelineError(f"{where} must be a table of check settings")
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = set(raw) - fields
        if unknown:
            raise PipelineError(f"unknown {where} keys {sorted(unknown)}; known: "
                                f"{sorted(fields)}")
        values = dict(raw)
        for key in LAYER_LISTS:
            value = values.get(key)
            if value is not None and (not isinstance(value, list | tuple)
                                      or not all(isinstance(v, str) for v in value)):
                raise PipelineError(f"{where} {key} must be a list of layer names")
        for key in ("total_order_per_key", "exempt_crashed_origins"):
            if key in values and not isinstance(values[key], bool):
                raise PipelineError(f"{where} {key} must be true or false")
        if "revision_field" in values and not isinstance(values["revision_field"], str):
            raise PipelineError(f"{where} revision_field must be a string")
        converted: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                     for k, v in values.items()}
        try:
            return cls(**converted)
        except (TypeError, PipelineError) as exc:
            raise PipelineError(f"{where}: {exc}") from exc


def _publish_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "publish") & layer_filter(layers)


def _deliver_evidence(layers: Sequence[str] | None) -> Column:
    return (F.col("event") == "deliver") & layer_filter(layers)


def _named(layers: Sequence[str] | None) -> str:
    return "any layer" if layers is None else f"layers {', '.join(layers)}"


def reliability_check(*, layers: Sequence[str] | None = None,
                      exempt_crashed_origins: bool = False,
                      session_layers: Sequence[str] = ()) -> Check:
    return Check(
        "reliability", _publish_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was published in {_named(layers)}: no node owed anything",
        lambda trace: reliability_violations(
            trace, layers=layers, exempt_crashed_origins=exempt_crashed_origins,
            session_layers=session_layers),
        columns=("msg", "origin", "key"), incomplete=_publish_evidence(layers),
        lacking="publish rows carry no message id (msg)")


def own_delivery_check(*, layers: Sequence[str] | None = None,
                       own_layers: Sequence[str] | None = None,
                       session_layers: Sequence[str] = ()) -> Check:
    """Origins deliver their own messages in ``own_layers`` (None: where the trace shows some
    origin does, within ``layers``)."""
    if own_layers is not None and not own_layers:
        return Check("own delivery", None, "no layer is declared to deliver an origin's own "
                     "messages (analysis own_delivery_layers = [])", None)
    if own_layers is None:
        evidence = _deliver_evidence(layers) & (F.col("node") == F.col("origin"))
        missing = (f"no origin delivers its own messages in {_named(layers)}: the services "
                   "here do not promise it (seed 000's writers apply their own writes instead)")
        incomplete = None
    else:
        scope = [layer for layer in own_layers if layers is None or layer in layers]
        evidence = _publish_evidence(scope) & F.col("origin").isNotNull()
        missing = f"nothing was published in the layers {', '.join(own_layers)}"
        incomplete = _publish_evidence(scope)
    return Check(
        "own delivery", evidence, missing,
        lambda trace: own_delivery_violations(trace, layers=layers, own_layers=own_layers,
                                              session_layers=session_layers),
        columns=("msg", "origin", "key"), incomplete=incomplete,
        lacking="publish rows carry no origin")


def duplicates_check(*, layers: Sequence[str] | None = None) -> Check:
    return Check(
        "duplicates", _deliver_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was delivered in {_named(layers)}",
        lambda trace: duplicate_violations(trace, layers=layers),
        columns=("msg",), incomplete=_deliver_evidence(layers),
        lacking="deliver rows carry no message id (msg)")


def validity_check(*, layers: Sequence[str] | None = None, complete: bool = True) -> Check:
    return Check(
        "validity", _deliver_evidence(layers) & F.col("msg").isNotNull(),
        f"nothing was delivered in {_named(layers)}",
        lambda trace: validity_violations(trace, layers=layers, complete=complete),
        columns=("msg", "key"), incomplete=_deliver_evidence(layers),
        lacking="deliver rows carry no message id (msg)")


def fifo_check(*, layers: Sequence[str] | None = None,
               session_layers: Sequence[str] = ()) -> Check:
    if layers is not None and not layers:
        return Check("fifo", None, "no layer is declared FIFO (analysis fifo_layers = [])", None)
    return Check(
        "fifo", _deliver_evidence(layers) & F.col("origin").isNotNull()
        & F.col("seq").isNotNull(),
        f"nothing was delivered with an origin and seq in {_named(layers)}: no FIFO order to "
        "check",
        lambda trace: fifo_violations(trace, layers=layers, session_layers=session_layers),
        columns=("origin", "seq"),
        incomplete=None if layers is None else _deliver_evidence(layers),
        lacking=f"deliver rows of the FIFO layers ({_named(layers)}) carry no origin and seq")


def causal_check(*, layers: Sequence[str] | None = None, declared: bool = False) -> Check:
    return Check(
        "causal", _deliver_evidence(layers) & vector_column().isNotNull(),
        f"no deliver row in {_named(layers)} records a vector clock (info.vector): no layer "
        "here traces causal order",
        lambda trace: causal_violations(trace, layers=layers),
        columns=("info", "origin", "seq"),
        incomplete=_deliver_evidence(layers) if declared else None,
        lacking=f"deliver rows of the causal layers ({_named(layers)}) carry no vector clock "
                "(info.vector)")


def total_order_check(*, layers: Sequence[str], per_key: bool = False,
                      revision_field: str = "rev") -> Check:
    if not layers:
        return Check("total order", None,
                     "no layer is declared totally ordered (analyze --total-order LAYER)", None)
    scope = " per key" if per_key else ""
    key_rows = F.col("key").isNotNull() if per_key else F.lit(True)
    evidence = _deliver_evidence(layers) & F.col("msg").isNotNull() & key_rows
    if per_key:
        evidence = evidence | ((F.col("event") == "apply") & layer_filter(layers) & key_rows
                               & info_field(revision_field).isNotNull())
    return Check(
        "total order", evidence,
        f"nothing was delivered in the totally ordered layers {', '.join(layers)}{scope}",
        lambda trace: total_order_violations(trace, layers=layers, per_key=per_key,
                                             revision_field=revision_field),
        columns=("msg", "key", "info") if per_key else ("msg",),
        incomplete=_deliver_evidence(layers),
        lacking=f"deliver rows of {', '.join(layers)} carry no message id"
                + (" and key" if per_key else ""))


def convergence_check(*, layers: Sequence[str] | None = None,
                      revision_field: str = "rev") -> Check:
    return Check(
        "convergence",
        F.col("event").isin("apply", "deliver") & layer_filter(layers) & F.col("key").isNotNull()
        & info_field(revision_field).isNotNull(),
        f"no apply or deliver row in {_named(layers)} carries a key and a revision "
        f"(info.{revision_field}): nothing here replicates objects",
        lambda trace: convergence_violations(trace, layers=layers,
                                             revision_field=revision_field),
        columns=("key", "info"),
        incomplete=(F.col("event") == "apply") & layer_filter(layers),
        lacking=f"apply rows carry no key and revision (info.{revision_field})")


def round_consistency_check(*, layers: Sequence[str]) -> Check:
    """Seed 002: every peer applies what CTRL applied to each object in a round, in its order
    and with its result, and acknowledgements match what was applied (``round_checks``)."""
    return Check(
        "round consistency", (F.col("event") == ROUND) & layer_filter(layers),
        f"no sync round was traced in {', '.join(layers)}",
        lambda trace: round_consistency_violations(trace, layers=layers),
        columns=("key", "seq", "msg", "peer", "info"))


def atomicity_check() -> Check:
    """Seed 004's all-or-none of the sender's snapshot (``atomic_checks``)."""
    return Check(
        "atomicity", atomicity_evidence(),
        "no atomic multicast here: no commit or abort rows in layer atomic",
        atomicity_violations, columns=("msg", "origin", "seq", "info"))


def default_checks(config: CheckConfig | None = None, *, complete: bool = True) -> list[Check]:
    """Every check, configured: reliability, own delivery, duplicates, validity, FIFO,
    causal, total order, convergence, atomicity, and the Paxos layer's (``paxos_checks``).
    ``complete`` False: some of the trace's files were left out (see
    ``validity_violations``)."""

    config = config if config is not None else CheckConfig()
    layers = config.layers
    causal_layers = layers if config.causal_layers is None else config.causal_layers
    return [
        reliability_check(layers=layers, exempt_crashed_origins=config.exempt_crashed_origins,
                          session_layers=config.session_layers),
        own_delivery_check(layers=layers, own_layers=config.own_delivery_layers,
                           session_layers=config.session_layers),
        duplicates_check(layers=layers),
        validity_check(layers=layers, complete=complete),
        fifo_check(layers=layers if config.fifo_layers is None else config.fifo_layers,
                   session_layers=config.session_layers),
        causal_check(layers=causal_layers, declared=config.causal_layers is not None),
        total_order_check(layers=config.total_order_layers,
                          per_key=config.total_order_per_key,
                          revision_field=config.revision_field),
        convergence_check(layers=layers, revision_field=config.revision_field),
        atomicity_check(),
        *paxos_checks(),
        *([round_consistency_check(layers=config.round_layers)] if config.round_layers
          else []),
    ]


Materialize = Callable[[str, DataFrame], DataFrame]


def evaluate(
    trace: DataFrame,
    checks: Sequence[Check],
    *,
    materialize: Materialize | None = None,
    on_check: Callable[[str], None] | None = None,
    absent_columns: Collection[str] | Mapping[str, Sequence[Any]] = (),
    overlap: Overlap | None = None,
) -> list[CheckResult]:
    """Verdicts for ``checks``: one pass over the trace finds which apply, then each applicable
    check's violations are counted (after ``materialize``, e.g. written to Parquet and read
    back, so they are computed once; with ``overlap``, the checks on its threads: the results
    keep the order of ``checks``). ``absent_columns``: columns the trace files lack (read as
    nulls), or a mapping of them to the files that lack them: a check that needs one is an
    error naming it (and a file). The checks share what they have in
    common (``sharing_intermediates``)."""
    with sharing_intermediates():
        return _evaluate(with_row_order(trace), checks, materialize, on_check, absent_columns,
                         overlap or Overlap(1))


def _judged(name: str, query: Callable[[DataFrame], DataFrame], trace: DataFrame,
            materialize: Materialize | None) -> CheckResult:
    violations = query(trace)
    if materialize is not None:
        violations = materialize(name, violations)
    count = violations.count()
    status = Status.FAIL if count else Status.PASS
    reason = f"{count:,} violations" if count else "no violations"
    return CheckResult(name, status, reason, count, violations)


def _evaluate(trace: DataFrame, checks: Sequence[Check], materialize: Materialize | None,
              on_check: Callable[[str], None] | None,
              absent_columns: Collection[str] | Mapping[str, Sequence[Any]],
              overlap: Overlap) -> list[CheckResult]:
    absent = set(absent_columns)
    lacks = {c.name: [col for col in (*BASE_COLUMNS, *c.columns) if col in absent]
             for c in checks}
    flags: dict[str, int] = {}
    probes = []
    for i, check in enumerate(checks):
        if check.evidence is None or lacks[check.name]:
            continue
        probes.append(F.max(F.when(check.evidence, 1).otherwise(0)).alias(f"e{i}"))
        if check.incomplete is not None:
            probes.append(F.max(F.when(check.incomplete, 1).otherwise(0)).alias(f"i{i}"))
    if probes:
        first = trace.agg(*probes).first()
        flags = {k: int(v or 0) for k, v in (first.asDict() if first is not None else {}).items()}
    results: list[CheckResult | Future[CheckResult]] = []
    for i, check in enumerate(checks):
        if on_check is not None:
            on_check(check.name)
        if lacks[check.name]:
            columns = ", ".join(lacks[check.name])
            where = "the trace files have"
            if isinstance(absent_columns, Mapping):  # column -> the files without it
                files = sorted({str(f) for c in lacks[check.name] for f in absent_columns[c]})
                if files:
                    where = (f"{files[0]} has" if len(files) == 1 else
                             f"{len(files)} trace files ({files[0]}, ...) have")
            results.append(CheckResult(
                check.name, Status.ERROR, f"cannot check: {where} no column {columns}, "
                "which this check needs", 0, None))
            continue
        if check.violations is None or not flags.get(f"e{i}"):
            if flags.get(f"i{i}"):
                results.append(CheckResult(check.name, Status.ERROR,
                                           f"cannot check: {check.lacking}", 0, None))
            else:
                results.append(CheckResult(check.name, Status.NOT_APPLICABLE, check.missing, 0,
                                           None))
            continue
        results.append(overlap.submit(functools.partial(
            _judged, check.name, check.violations, trace, materialize)))
    return [r.result() if isinstance(r, Future) else r for r in results]
