"""Shared test setup: Hypothesis profiles, chosen by GOSSAMER_HYPOTHESIS_PROFILE (default "ci")."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("GOSSAMER_HYPOTHESIS_PROFILE", "ci"))
