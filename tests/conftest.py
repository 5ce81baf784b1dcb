"""Fixtures any test may ask for. The factories behind them live in ``tests/factories.py``;
a module-level helper imports them from there (``from tests.factories import fake_result``)."""

from __future__ import annotations

import pytest

from tests import factories


@pytest.fixture
def fake_result():
    """``fake_result(mode, status=..., target=..., noise_scale=..., **overrides)``: one run's
    result, valid against the result schema (``tests.factories.fake_result``)."""
    return factories.fake_result


@pytest.fixture
def summary_row():
    """``summary_row(mode, status=..., **overrides)``: one row of ``summary.csv``, absent points
    (``failed``, ``missing``) included (``tests.factories.summary_row``)."""
    return factories.summary_row
