"""cli: the ``gossamer`` command (sim, trace, bench; more verbs arrive with their services)."""
