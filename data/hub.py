"""Publish a GUST dataset folder to the Hugging Face Hub (or stage it only, as a dry run).

The folder that is uploaded is staged first and holds exactly the files the Hub repo will hold
(`data/train-*.parquet`, `README.md`, `stats.png`). The token comes from `HF_TOKEN` and is never logged.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from data.models import StrictModel
from gustforge.errors import InputError

__all__ = ["PublishResult", "stage_folder", "publish", "is_transient_hub_error"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_UPLOAD_PATTERNS = ("data/train-*-of-*.parquet", "README.md", "stats.png")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class PublishResult(StrictModel):
    """What `publish` did: the staged files and, unless a dry run, the commit URL."""

    repo_id: str
    folder: str
    files: tuple[str, ...]
    dry_run: bool
    commit_url: str | None = None


def stage_folder(folder: Path, dest: Path) -> list[str]:
    """Copy exactly the uploadable files of a GUST folder into `dest` (emptied first).

    Args:
        folder: Output of `data.gust.write_gust`.
        dest: Staging folder; its previous content is removed.

    Returns:
        The staged paths relative to `dest`, sorted.

    Raises:
        InputError: The folder lacks shards or the card.
    """
    folder, dest = Path(folder), Path(dest)
    files = sorted({p.relative_to(folder).as_posix() for pat in _UPLOAD_PATTERNS for p in folder.glob(pat)})
    if "README.md" not in files or not any(f.startswith("data/") for f in files):
        raise InputError(f"{folder} is not a GUST dataset folder (needs README.md and data/train-*.parquet)")
    if dest.exists():
        shutil.rmtree(dest)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / rel, dest / rel)
    return files


def is_transient_hub_error(exc: BaseException) -> bool:
    """Network failures and 408/429/5xx answers are worth retrying; anything else is not."""
    if isinstance(exc, HfHubHTTPError):
        return exc.response is not None and exc.response.status_code in _TRANSIENT_STATUS
    return isinstance(exc, (httpx.TransportError, ConnectionError, TimeoutError))


def _with_retries(action: Callable[[], T], *, what: str, max_retries: int, backoff_s: float) -> T:
    jitter = random.Random(what)
    attempt = 0
    while True:
        try:
            return action()
        except Exception as exc:
            if attempt >= max_retries or not is_transient_hub_error(exc):
                raise
            delay = backoff_s * (2**attempt) * (1 + jitter.random() / 2)
            attempt += 1
            logger.warning(
                "%s failed (%s); retry %d/%d in %.1fs", what, type(exc).__name__, attempt, max_retries, delay
            )
            time.sleep(delay)


def publish(
    folder: Path,
    repo_id: str,
    *,
    private: bool,
    api: HfApi | None = None,
    dry_run_dir: Path | None = None,
    commit_message: str = "Upload GUST dataset",
    max_retries: int = 3,
    backoff_s: float = 2.0,
) -> PublishResult:
    """Stage a GUST folder and upload it as a Hub dataset repo.

    Args:
        folder: Output of `data.gust.write_gust`.
        repo_id: `owner/name` of the dataset repo.
        private: Create the repo private.
        api: Hub client; default `HfApi(token=$HF_TOKEN)`.
        dry_run_dir: When given, stage the exact upload folder here and stop (no network).
        commit_message: Commit message of the upload.
        max_retries: Retries of transient Hub errors (network, 408/429/5xx) per call.
        backoff_s: First retry delay; doubles each retry, with jitter.

    Returns:
        A `PublishResult` listing the staged files.

    Raises:
        InputError: `folder` is not a GUST dataset folder.
        HfHubHTTPError: A non-transient Hub error, or a transient one after `max_retries`.
    """
    if dry_run_dir is not None:
        files = stage_folder(folder, dry_run_dir)
        logger.info("dry run: staged %d files for %s in %s", len(files), repo_id, dry_run_dir)
        return PublishResult(repo_id=repo_id, folder=str(dry_run_dir), files=tuple(files), dry_run=True)
    client = api if api is not None else HfApi(token=os.environ.get("HF_TOKEN") or None)
    with tempfile.TemporaryDirectory(prefix="gust-publish-") as tmp:
        staged = Path(tmp) / "repo"
        files = stage_folder(folder, staged)
        _with_retries(
            lambda: client.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True),
            what=f"create_repo {repo_id}",
            max_retries=max_retries,
            backoff_s=backoff_s,
        )
        info = _with_retries(
            lambda: client.upload_folder(
                repo_id=repo_id,
                folder_path=staged,
                repo_type="dataset",
                commit_message=commit_message,
                delete_patterns=["data/*.parquet"],
            ),
            what=f"upload_folder {repo_id}",
            max_retries=max_retries,
            backoff_s=backoff_s,
        )
    url = getattr(info, "commit_url", None)
    logger.info("published %d files to %s", len(files), repo_id)
    return PublishResult(
        repo_id=repo_id,
        folder=str(folder),
        files=tuple(files),
        dry_run=False,
        commit_url=url if isinstance(url, str) else None,
    )
