"""Configuration of the export stage (the GUST folder's splits); a light module so the build config can import it."""

from __future__ import annotations

from pydantic import Field

from data.models import StrictModel

__all__ = ["ExportConfig"]


class ExportConfig(StrictModel):
    """How `gust build` exports the GUST folder (`--set export.KEY=VALUE`)."""

    heldout_fraction: float = Field(
        default=0.2,
        ge=0,
        lt=1,
        description="Share of environments whose tasks form the held-out `test` split (no environment is in both "
        "splits; at least one env is held out when there are two or more); 0 = a train split only.",
    )
    split_seed: int | None = Field(default=None, description="Seed of the environment shuffle; None = build seed.")
