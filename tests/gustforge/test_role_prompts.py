"""Every LLM role's prompt as the endpoint receives it (issue 25): no doubled braces left by a template that is
never formatted (the codegen prompt sent `{{"status": "error", ...}}`), no unfilled placeholder, every input
present."""

from __future__ import annotations

import re
from typing import Any

import pytest

from gustforge.llm.roles import LLMRole, render_messages

_PLACEHOLDER = re.compile(r"(?<!\{)\{[A-Za-z_][A-Za-z0-9_]*\}(?!\})")


def _roles() -> list[LLMRole]:
    from envgen.codegen import CODEGEN_ROLE
    from envgen.database import DATABASE_ROLE
    from envgen.refactor import REFACTOR_ROLE
    from tdg.prompts import make_judge_role
    from tdg.taskgen import make_task_writer_role
    from toucan.responder import MOCKER_ROLE

    return [REFACTOR_ROLE, DATABASE_ROLE, CODEGEN_ROLE, make_judge_role(lambda inputs: {}), make_task_writer_role(),
            MOCKER_ROLE]  # fmt: skip


@pytest.mark.parametrize("role", _roles(), ids=lambda role: role.name)
def test_rendered_prompt_is_what_the_model_should_read(role: LLMRole) -> None:
    inputs: dict[str, Any] = {name: f"<input {name}>" for name in role.template_fields}
    messages = render_messages(role, inputs)
    assert [m["role"] for m in messages] == ["system", "user"]
    system, user = messages[0]["content"], messages[1]["content"]
    assert system.startswith(role.system_prompt)  # sent verbatim (the output schema's JSON follows it)
    for text in (role.system_prompt, user):
        assert "{{" not in text and "}}" not in text, (role.name, text[:3000])
        assert not _PLACEHOLDER.findall(text), (role.name, _PLACEHOLDER.findall(text))
    for name in role.template_fields:
        assert f"<input {name}>" in messages[1]["content"], (role.name, name)


def test_reward_judge_prompt_renders_every_field() -> None:
    from trainer.rewards.judge import make_judge_input, render_judge_prompt

    text = render_judge_prompt(make_judge_input("<question>", ["<response 1>"], "<final>"))
    assert all(part in text for part in ("<question>", "<response 1>", "<final>"))
    assert "{{" not in text and "}}" not in text and not _PLACEHOLDER.findall(text)


def test_teacher_and_simulated_user_prompts_are_plain_text() -> None:
    from gusteval.scenario import UserScenario
    from gusteval.user_sim import user_system_prompt
    from tdg.verify_config import TeacherConfig

    user = user_system_prompt(UserScenario(task_id="t", goal="<goal>"))
    for text in (TeacherConfig().system_prompt, user):
        assert "{{" not in text and "}}" not in text and not _PLACEHOLDER.findall(text), text[:2000]
    assert "<goal>" in user
