"""Issue 25: an endpoint answering garbage for one role never yields a successful build made from garbage, and the
next build with a healthy endpoint asks that role again and produces the items that failed (the stage cache does
not keep serving the failure)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.build import run_build
from gustforge.config import BuildConfig, load_config
from gustforge.errors import BAD_REPLY_REASONS, BudgetExceededError
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.twin_responder import TwinResponder

pytestmark = [pytest.mark.slow, pytest.mark.prefect]


class GarbageFor:
    """The twin's answers, except garbage prose for one role while `broken` is set."""

    def __init__(self, role: str) -> None:
        self.twin = TwinResponder()
        self.role = role
        self.broken = True
        self.garbage = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        before = dict(self.twin.calls)
        answer = self.twin(request)
        asked = next(role for role, n in self.twin.calls.items() if n != before.get(role, 0))
        if self.broken and asked == self.role:
            self.garbage += 1
            return {"content": "Sure! Here is what you asked for, in words rather than JSON."}
        return answer


def _cfg(server: FakeOpenAIServer, out: Path) -> BuildConfig:
    env = {"GUST_LLM_BACKEND": "openai", "GUST_LLM_BASE_URL": server.base_url, "GUST_LLM_MODEL": "fake-model",
           "GUST_LLM_MAX_RETRIES": "1", "GUST_LLM_BACKOFF_BASE_S": "0.01", "GUST_LLM_BACKOFF_MAX_S": "0.02"}  # fmt: skip
    return load_config(None, ["verify.teacher.base_url=null"], environ=env, out=out)


STAGE_OF_ROLE = {"refactor": "envgen", "database": "envgen", "codegen": "envgen", "tdg_judge": "tdg",
                 "task_writer": "tasks"}  # fmt: skip


@pytest.mark.parametrize("role", sorted(STAGE_OF_ROLE))
def test_garbage_fails_the_build_and_a_healthy_rerun_asks_again(prefect_server: None, tmp_path: Path,
                                                                role: str) -> None:  # fmt: skip
    responder = GarbageFor(role)
    with FakeOpenAIServer(responder) as server:
        cfg = _cfg(server, tmp_path / "run")
        with pytest.raises(BudgetExceededError, match="over its error budget") as failed:
            run_build(cfg)
        assert responder.garbage > 0
        assert any(reason in str(failed.value) for reason in BAD_REPLY_REASONS), str(failed.value)
        assert not (cfg.out / "gust").exists(), "rows were exported from a failed stage"
        asked_before = responder.twin.calls[role]
        responder.broken = False
        summary = run_build(cfg)
    assert responder.twin.calls[role] > asked_before  # the failed items were asked again, not served from cache
    assert summary.problems == () and summary.gust_rows > 0
    assert not set(summary.stages[STAGE_OF_ROLE[role]].dropped) & BAD_REPLY_REASONS, summary.stages
