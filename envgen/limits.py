"""Limits that keep one hostile input from hurting a run: whatever exceeds them is quarantined with a reason."""

from __future__ import annotations

from pydantic import Field

from data.models import StrictModel

__all__ = ["IngestLimits"]


class IngestLimits(StrictModel):
    """Depth, size and count limits of raw tool definitions (`envgen.limits.*` in the build config).

    Each limit quarantines the record (or the file) that exceeds it with its own reason code; the run goes on.
    """

    max_file_bytes: int = Field(
        default=2 * 1024**3, ge=1, description="Larger input files are quarantined whole (`file_too_large`)."
    )
    max_record_chars: int = Field(
        default=20_000_000, ge=1, description="Longer records (jsonl lines, .json files) → `record_too_large`."
    )
    max_record_depth: int = Field(
        default=64, ge=2, description="Deeper JSON nesting in one record → `record_too_deep` (checked before parsing)."
    )
    max_schema_depth: int = Field(
        default=32, ge=2, description="Deeper nesting in one tool's parameter schema → `schema_too_deep`."
    )
    max_schema_chars: int = Field(default=200_000, ge=1, description="Larger parameter schemas → `schema_too_large`.")
    max_schema_nodes: int = Field(
        default=20_000, ge=1, description="Parameter schemas with more objects/lists/values → `schema_too_large`."
    )
    max_tool_name_chars: int = Field(default=256, ge=1, description="Longer tool names → `tool_name_too_long`.")
    max_tools_per_record: int = Field(
        default=1_000, ge=1, description="Records listing more tools are rejected before parsing (`too_many_tools`)."
    )
