"""Pre-flight checks: one line per problem, with its fix, against real local servers."""

from __future__ import annotations

from pathlib import Path

from gustforge.config import load_config
from gustforge.preflight import build_problems, check_endpoint, check_extras, check_hf_token
from tests.fakes.openai_server import FakeOpenAIServer


def test_build_problems_name_each_endpoint_and_the_fix(tmp_path: Path) -> None:
    assert build_problems(load_config(None, [], out=tmp_path / "o")) == []  # offline default: nothing to check
    no_url = load_config(None, ["llm.backend=openai"], out=tmp_path / "o")
    assert any("no endpoint is configured" in p.line() and "--backend offline" in p.line()
               for p in build_problems(no_url))  # fmt: skip
    with FakeOpenAIServer(model="m1") as server:
        ok = load_config(None, ["llm.backend=openai", f"llm.base_url={server.base_url}", "llm.model=m1",
                                f"verify.teacher.base_url={server.base_url}"], out=tmp_path / "o")  # fmt: skip
        assert build_problems(ok) == []
        wrong = load_config(None, [f"verify.teacher.base_url={server.base_url}", "verify.teacher.model=m2"],
                            out=tmp_path / "o")  # fmt: skip
        [problem] = build_problems(wrong)
    assert problem.what.startswith("teacher endpoint") and "m2" in problem.what


def test_out_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    [problem] = build_problems(load_config(None, [], out=tmp_path / "f"))
    assert "is a file" in problem.line()


def test_not_openai_compatible_and_unreachable() -> None:
    problem = check_endpoint("http://127.0.0.1:9/v1", None)
    assert problem is not None and "does not answer GET /models" in problem.what


def test_token_and_extras() -> None:
    assert check_hf_token({"HF_TOKEN": "hf_x"}) is None
    problem = check_hf_token({})
    assert problem is not None and "export HF_TOKEN=" in problem.fix
    assert check_extras(["dev"], purpose="tests") == []  # hypothesis and pytest are here
