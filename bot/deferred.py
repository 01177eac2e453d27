"""The base of the app's pydantic models: each builds its validator when first used.

Pydantic builds a model's validator (its core schema) when the class is created, unless ``defer_build``
is set. Built at import, the app's ~100 models cost every restarted process their build before it could
answer a click, though its first click uses about a third of them (App Home's, approver lists', policies',
schedules', the audit's and most events' are not among them). Deferred, a model is built the first time
it validates or dumps, then reused. tests/e2e/test_start_fast.py checks that importing the app builds
none but the two every start uses; docs/PERFORMANCE.md ("Start fast") has the figures.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class DeferredModel(BaseModel):
    """``BaseModel`` whose validator is built on first use; subclasses add to ``model_config`` as usual."""

    model_config = ConfigDict(defer_build=True)
