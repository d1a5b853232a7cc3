"""`OUT/manifest.json`: one record of the run that last wrote a run folder, written last and atomically.

A run writes `state: running` when it starts and its final record (`completed`, `failed` or `interrupted`) after
everything else: the config digest, the row count, the problems, and the sha256 of the files that describe the
dataset (`run_summary.json`, `config.json`, `reports/quality.json`, the GUST folder with its card, the verl
parquet). `check_manifest` says which of them changed since, so a reader can tell whether summary, card and files
still agree. Every final record is also appended to `OUT/runs.jsonl`, the folder's build history (`gust runs`).
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from data import io
from data.models import StrictModel
from gustforge.hashing import content_hash
from gustforge.outputs import path_digest, record_outputs

if TYPE_CHECKING:
    from gustforge.config import BuildConfig
    from gustforge.run_summary import RunSummary

__all__ = [
    "MANIFEST_NAME",
    "HISTORY_NAME",
    "DESCRIBED_FILES",
    "RunManifest",
    "RunRecorder",
    "config_digest",
    "run_record",
    "read_manifest",
    "read_history",
    "check_manifest",
    "process_alive",
]

MANIFEST_NAME = "manifest.json"
HISTORY_NAME = "runs.jsonl"
# the files that describe the dataset; they must agree with each other and with the data
DESCRIBED_FILES = ("run_summary.json", "config.json", "reports/quality.json", "gust", "verl/train.parquet",
                   "verl/test.parquet")  # fmt: skip
State = Literal["running", "completed", "failed", "interrupted", "killed"]


class RunManifest(StrictModel):
    run_id: str
    command: str = Field(description="`build`, or `stage NAME` for `gust stage`.")
    state: State
    pid: int
    host: str
    started_at: float
    finished_at: float | None = None
    flow_run_id: str | None = None
    config_digest: str
    gust_rows: int | None = None
    problems: tuple[str, ...] = ()
    error: str | None = None
    stale: tuple[str, ...] = Field(
        default=(), description="Stages whose outputs in this folder were not re-run after an upstream change."
    )
    files: dict[str, str] = Field(default_factory=dict, description="sha256 of the described files as written.")


def config_digest(cfg: BuildConfig) -> str:
    """A short digest of the effective config, without the run folder (the same config elsewhere is equal)."""
    dumped = cfg.model_dump(mode="json")
    dumped.pop("out", None)
    return content_hash(dumped)[:16]


def _now() -> float:
    return round(time.time(), 3)


class RunRecorder:
    """The running record of one run; `finish` fills in what the summary says before the record is closed."""

    def __init__(self, out: Path, manifest: RunManifest) -> None:
        self.out = out
        self.manifest = manifest
        self.summary: RunSummary | None = None
        self.stale: tuple[str, ...] = ()

    def finish(self, summary: RunSummary, *, stale: Sequence[str] = ()) -> None:
        self.summary = summary
        self.stale = tuple(stale)

    def _close(self, state: State, error: str | None) -> RunManifest:
        summary = self.summary
        update: dict[str, Any] = {"state": state, "error": error, "finished_at": _now(), "stale": self.stale,
                                  "files": record_outputs(self.out, DESCRIBED_FILES)}  # fmt: skip
        if summary is not None:
            update |= {"gust_rows": summary.gust_rows, "problems": summary.problems}
            if summary.problems and state == "completed":
                update["state"] = "failed"
        self.manifest = self.manifest.model_copy(update=update)
        io.write_json(self.out / MANIFEST_NAME, self.manifest)  # last, atomically (temp file + rename)
        io.append_jsonl(self.out / HISTORY_NAME, self.manifest)
        return self.manifest


@contextlib.contextmanager
def run_record(out: Path, cfg: BuildConfig, *, command: str, flow_run_id: str | None = None) -> Iterator[RunRecorder]:
    """Write `state: running` now; the final manifest when the body ends (failed/interrupted if it raised)."""
    out = Path(out)
    _close_killed(out)
    manifest = RunManifest(run_id=flow_run_id or uuid.uuid4().hex, command=command, state="running",
                           pid=os.getpid(), host=socket.gethostname(), started_at=_now(),
                           flow_run_id=flow_run_id, config_digest=config_digest(cfg))  # fmt: skip
    io.write_json(out / MANIFEST_NAME, manifest)
    recorder = RunRecorder(out, manifest)
    try:
        yield recorder
    except (KeyboardInterrupt, SystemExit) as exc:
        recorder._close("interrupted", type(exc).__name__)
        raise
    except Exception as exc:  # the run's one record of why it failed; the error propagates unchanged
        recorder._close("failed", f"{type(exc).__name__}: {exc}")
        raise
    recorder._close("completed", None)


def _close_killed(out: Path) -> None:
    """A record left `running` by a process that died without closing it (SIGKILL) goes to the history as
    `killed` before a new run replaces it; the caller holds the run folder's lock, so it is not running now."""
    previous = read_manifest(out)
    if previous is not None and previous.state == "running":
        io.append_jsonl(out / HISTORY_NAME, previous.model_copy(update={"state": "killed"}))


def read_manifest(out: Path) -> RunManifest | None:
    path = Path(out) / MANIFEST_NAME
    return RunManifest.model_validate(io.read_json(path)) if path.is_file() else None


def read_history(out: Path) -> list[RunManifest]:
    """Every finished run recorded in `OUT/runs.jsonl`, oldest first (unreadable lines skipped)."""
    path = Path(out) / HISTORY_NAME
    if not path.is_file():
        return []
    runs = []
    for line in io.read_jsonl(path):
        with contextlib.suppress(ValueError):
            runs.append(RunManifest.model_validate(line))
    return runs


def check_manifest(out: Path) -> list[str]:
    """Described files whose content differs from what the last run recorded (empty: they agree)."""
    manifest = read_manifest(out)
    if manifest is None:
        return [MANIFEST_NAME]
    return [path for path, digest in sorted(manifest.files.items()) if path_digest(Path(out) / path) != digest]


def process_alive(pid: int, host: str) -> bool | None:
    """Whether a run's process still exists (None: it ran on another host, unknown from here)."""
    if host != socket.gethostname():
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
