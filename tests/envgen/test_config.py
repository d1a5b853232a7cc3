"""envgen.config: the paper's filter is the default, and departing from it is visible."""

from __future__ import annotations

from envgen.config import PAPER_MAX_PARAMS, PAPER_MAX_TOOLS, PAPER_MIN_TOOLS, EnvGenConfig


def test_paper_filter_is_the_default() -> None:
    cfg = EnvGenConfig()
    assert (cfg.min_tools, cfg.max_tools, cfg.max_params) == (PAPER_MIN_TOOLS, PAPER_MAX_TOOLS, PAPER_MAX_PARAMS)
    assert (PAPER_MIN_TOOLS, PAPER_MAX_TOOLS, PAPER_MAX_PARAMS) == (5, 20, 4) and not cfg.paper_filter_overridden


def test_overriding_the_filter_is_flagged() -> None:
    assert EnvGenConfig(min_tools=2).paper_filter_overridden
    assert EnvGenConfig(max_params=None).paper_filter_overridden
    assert not EnvGenConfig(max_repairs=5).paper_filter_overridden  # other settings are not the filter
