"""Publishing: the staged folder is exactly the Hub repo, loads with `datasets`, and the HfApi calls are right."""

from __future__ import annotations

import shutil
from pathlib import Path
from unittest import mock

import httpx
import pytest
from datasets import load_dataset
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError

from data.envs import ENV_FILES
from data.gust import read_gust, write_gust
from data.hub import PublishResult, is_transient_hub_error, publish, pull_env
from gustforge.errors import InputError
from tests.data._gust_fixtures import make_record

FILTERS = {"replay": True, "solvability": True, "teacher_pass_at_k": False}
TINY_ENV = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"
EXPECTED = sorted(["README.md", "data/train-00000-of-00002.parquet", "data/train-00001-of-00002.parquet", "stats.png",
                   *(f"envs/env_a/{name}" for name in ENV_FILES)])  # fmt: skip


@pytest.fixture()
def gust_dir(tmp_path: Path) -> Path:
    out = write_gust(
        [make_record(i) for i in range(3)], tmp_path / "gust", seed=0, filters_run=FILTERS, max_rows_per_shard=2
    )
    (out / "notes.txt").write_text("not for upload")
    shutil.copytree(TINY_ENV, tmp_path / "envs" / "env_a")  # the run layout: OUT/gust beside OUT/envs
    (tmp_path / "envs" / "env_b").mkdir()  # an environment no row uses is not uploaded
    return out


def _http_error(status: int) -> HfHubHTTPError:
    request = httpx.Request("POST", "https://huggingface.co/api/datasets/me/gust/commit/main")
    return HfHubHTTPError(f"{status} error", response=httpx.Response(status, request=request))


class TestPublish:
    def test_dry_run_stages_exact_folder_and_loads(self, tmp_path, gust_dir):
        api = mock.create_autospec(HfApi, instance=True)
        staged = tmp_path / "staged"
        result = publish(gust_dir, "me/gust", private=True, api=api, dry_run_dir=staged)
        assert result == PublishResult(repo_id="me/gust", folder=str(staged), files=tuple(EXPECTED), dry_run=True)
        assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*") if p.is_file()) == EXPECTED
        api.create_repo.assert_not_called()
        api.upload_folder.assert_not_called()
        ds = load_dataset(str(staged), split="train", cache_dir=str(tmp_path / "cache"))
        assert sorted(ds["task_id"]) == sorted(r.task_id for r in read_gust(gust_dir))

    def test_upload_calls_create_repo_then_upload_folder(self, gust_dir):
        api = mock.create_autospec(HfApi, instance=True)
        seen: list[list[str]] = []

        def fake_upload(**kwargs):
            folder = Path(kwargs["folder_path"])
            seen.append(sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()))
            return mock.Mock(commit_url="https://huggingface.co/datasets/me/gust/commit/abc")

        api.upload_folder.side_effect = fake_upload
        result = publish(gust_dir, "me/gust", private=False, api=api)
        api.create_repo.assert_called_once_with("me/gust", repo_type="dataset", private=False, exist_ok=True)
        kwargs = api.upload_folder.call_args.kwargs
        assert kwargs["repo_id"] == "me/gust" and kwargs["repo_type"] == "dataset"
        assert kwargs["delete_patterns"] == ["data/*.parquet", "envs/**"]
        assert seen == [EXPECTED]
        assert result.commit_url.endswith("/commit/abc") and not result.dry_run

    def test_transient_errors_are_retried(self, gust_dir):
        api = mock.create_autospec(HfApi, instance=True)
        api.upload_folder.side_effect = [_http_error(503), httpx.ConnectError("reset"), mock.Mock(commit_url=None)]
        publish(gust_dir, "me/gust", private=True, api=api, backoff_s=0.0)
        assert api.upload_folder.call_count == 3

    def test_permanent_error_is_not_retried(self, gust_dir):
        api = mock.create_autospec(HfApi, instance=True)
        api.create_repo.side_effect = _http_error(403)
        with pytest.raises(HfHubHTTPError):
            publish(gust_dir, "me/gust", private=True, api=api, backoff_s=0.0)
        assert api.create_repo.call_count == 1
        api.upload_folder.assert_not_called()

    def test_exhausted_retries_raise(self, gust_dir):
        api = mock.create_autospec(HfApi, instance=True)
        api.upload_folder.side_effect = _http_error(502)
        with pytest.raises(HfHubHTTPError):
            publish(gust_dir, "me/gust", private=True, api=api, max_retries=2, backoff_s=0.0)
        assert api.upload_folder.call_count == 3

    def test_missing_environment_is_an_error(self, tmp_path, gust_dir):
        shutil.rmtree(tmp_path / "envs" / "env_a")
        with pytest.raises(InputError, match="env_a"):
            publish(gust_dir, "me/gust", private=True, dry_run_dir=tmp_path / "x")

    def test_card_names_the_repo(self, tmp_path, gust_dir):
        publish(gust_dir, "me/gust", private=True, dry_run_dir=tmp_path / "x")
        card = (tmp_path / "x" / "README.md").read_text()
        assert 'load_dataset("me/gust"' in card and "ORG/NAME" not in card

    def test_not_a_gust_folder(self, tmp_path):
        with pytest.raises(InputError, match="not a GUST dataset folder"):
            publish(tmp_path, "me/gust", private=True, dry_run_dir=tmp_path / "x")

    def test_token_comes_from_environment_and_is_not_logged(self, gust_dir, monkeypatch, caplog):
        monkeypatch.setenv("HF_TOKEN", "hf_secret_value")
        with mock.patch("data.hub.HfApi", autospec=True) as api_cls, caplog.at_level("DEBUG"):
            api_cls.return_value.upload_folder.return_value = mock.Mock(commit_url=None)
            publish(gust_dir, "me/gust", private=True)
        api_cls.assert_called_once_with(token="hf_secret_value")
        assert "hf_secret_value" not in caplog.text


def test_transient_classification():
    assert is_transient_hub_error(_http_error(429)) and is_transient_hub_error(httpx.ReadTimeout("t"))
    assert not is_transient_hub_error(_http_error(401)) and not is_transient_hub_error(ValueError("x"))


def test_pull_env_from_an_exported_folder(tmp_path, gust_dir):
    publish(gust_dir, "me/gust", private=True, dry_run_dir=tmp_path / "export")
    target = pull_env(tmp_path / "export", "env_a", tmp_path / "pulled")
    assert sorted(p.name for p in target.iterdir()) == sorted(ENV_FILES)
    with pytest.raises(InputError, match="no environment 'env_x'"):
        pull_env(tmp_path / "export", "env_x", tmp_path / "pulled")
