"""Publish a GUST dataset folder to the Hugging Face Hub (or stage it only, as a dry run).

The folder that is uploaded is staged first and holds exactly the files the Hub repo will hold
(`data/train-*.parquet`, `README.md`, `stats.png`, and `envs/<env_id>/` for every environment the rows use), so
the dataset stands alone: `gust env pull` (or `huggingface_hub.snapshot_download`) restores a runnable environment
from it. The token comes from `HF_TOKEN` and is never logged.
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

from data.envs import ENV_FILES
from data.gust import REPO_PLACEHOLDER
from data.models import StrictModel
from gustforge.errors import GustError, InputError

__all__ = ["PublishResult", "stage_folder", "publish", "is_transient_hub_error", "pull_env", "row_env_ids"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_UPLOAD_PATTERNS = ("data/train-*-of-*.parquet", "data/test-*-of-*.parquet", "README.md", "stats.png")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class PublishResult(StrictModel):
    """What `publish` did: the staged files and, unless a dry run, the commit URL."""

    repo_id: str
    folder: str
    files: tuple[str, ...]
    dry_run: bool
    commit_url: str | None = None


def row_env_ids(folder: Path) -> list[str]:
    """The distinct `env_id`s of a GUST folder's shards, sorted."""
    import pyarrow.parquet as pq

    ids: set[str] = set()
    for shard in sorted(Path(folder).glob("data/t*-*-of-*.parquet")):  # train and test splits
        ids.update(str(v) for v in pq.read_table(shard, columns=["env_id"]).column("env_id").to_pylist())
    return sorted(ids)


def stage_folder(folder: Path, dest: Path, *, envs_dir: Path | None = None, repo_id: str | None = None) -> list[str]:
    """Copy exactly the uploadable files of a GUST folder, plus the environments its rows use, into `dest`.

    Args:
        folder: Output of `data.gust.write_gust`.
        dest: Staging folder; its previous content is removed.
        envs_dir: The run's environments folder; default `folder/../envs` (the layout of `gust build`).
        repo_id: Written into the card's loading snippets in place of the `ORG/NAME` placeholder.

    Returns:
        The staged paths relative to `dest`, sorted.

    Raises:
        InputError: The folder lacks shards or the card, or an environment a row uses is missing.
    """
    folder, dest = Path(folder), Path(dest)
    envs_dir = Path(envs_dir) if envs_dir is not None else folder.parent / "envs"
    files = sorted({p.relative_to(folder).as_posix() for pat in _UPLOAD_PATTERNS for p in folder.glob(pat)})
    if "README.md" not in files or not any(f.startswith("data/") for f in files):
        raise InputError(f"{folder} is not a GUST dataset folder (needs README.md and data/train-*.parquet)")
    env_ids = row_env_ids(folder)
    missing = [e for e in env_ids if not all((envs_dir / e / name).is_file() for name in ENV_FILES)]
    if missing:
        raise InputError(f"rows use environments missing under {envs_dir}: {', '.join(missing[:5])}"
                         f"{' ...' if len(missing) > 5 else ''} (pass --envs OUT/envs)")  # fmt: skip
    if dest.exists():
        shutil.rmtree(dest)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / rel, dest / rel)
    if repo_id:
        card = dest / "README.md"
        card.write_text(card.read_text(encoding="utf-8").replace(REPO_PLACEHOLDER, repo_id), encoding="utf-8")
    for env_id in env_ids:
        for name in ENV_FILES:
            rel = f"envs/{env_id}/{name}"
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(envs_dir / env_id / name, dest / rel)
            files.append(rel)
    return sorted(files)


def pull_env(source: str | Path, env_id: str, dest: Path, *, token: str | None = None) -> Path:
    """Restore one environment of a published GUST dataset into `dest/<env_id>/` and check that it loads.

    Args:
        source: A Hub dataset repo id (`ORG/NAME`) or a local copy of one (an exported folder).
        env_id: The environment (a row's `env_id`).
        dest: Folder that receives `<env_id>/`.
        token: Hub token for private repos (default `HF_TOKEN`).

    Returns:
        The environment folder.

    Raises:
        InputError: The environment is not in the dataset, or its files do not load.
    """
    from envgen.runtime import Environment

    target = Path(dest) / env_id
    local = Path(source)
    if local.is_dir():
        origin = local / "envs" / env_id
        if not origin.is_dir():
            raise InputError(f"{local} holds no environment {env_id!r} (expected {origin})")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(origin, target, dirs_exist_ok=True)
    else:
        from huggingface_hub import snapshot_download

        with tempfile.TemporaryDirectory(prefix="gust-pull-") as tmp:
            snapshot_download(repo_id=str(source), repo_type="dataset", allow_patterns=[f"envs/{env_id}/*"],
                              local_dir=tmp, token=token or os.environ.get("HF_TOKEN") or None)  # fmt: skip
            origin = Path(tmp) / "envs" / env_id
            if not origin.is_dir():
                raise InputError(f"dataset {source} holds no environment {env_id!r}")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copytree(origin, target, dirs_exist_ok=True)
    try:
        Environment.load(target)
    except GustError as exc:
        raise InputError(f"environment {env_id} from {source} does not load: {exc}") from exc
    return target


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
    envs_dir: Path | None = None,
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
        envs_dir: The run's environments folder (default `folder/../envs`); the rows' environments are uploaded.
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
        files = stage_folder(folder, dry_run_dir, envs_dir=envs_dir, repo_id=repo_id)
        logger.info("dry run: staged %d files for %s in %s", len(files), repo_id, dry_run_dir)
        return PublishResult(repo_id=repo_id, folder=str(dry_run_dir), files=tuple(files), dry_run=True)
    client = api if api is not None else HfApi(token=os.environ.get("HF_TOKEN") or None)
    with tempfile.TemporaryDirectory(prefix="gust-publish-") as tmp:
        staged = Path(tmp) / "repo"
        files = stage_folder(folder, staged, envs_dir=envs_dir, repo_id=repo_id)
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
                delete_patterns=["data/*.parquet", "envs/**"],
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
