from pathlib import Path

import pytest
from pydantic import ValidationError

from gustforge.config import BuildConfig, load_config, parse_override
from gustforge.errors import ConfigError


def test_yaml_file_then_overrides_then_fields(tmp_path: Path) -> None:
    path = tmp_path / "build.yaml"
    path.write_text("seed: 3\nenvgen:\n  max_repairs: 1\n  min_tools: 3\ntdg:\n  n_graphs: 2\n")
    cfg = load_config(path, ["envgen.max_repairs=4", "runner.kind=ray"], out=tmp_path / "o")
    assert cfg.seed == 3 and cfg.envgen.min_tools == 3 and cfg.tdg.n_graphs == 2
    assert cfg.envgen.max_repairs == 4 and cfg.runner.kind == "ray" and cfg.out == tmp_path / "o"


def test_toml_file(tmp_path: Path) -> None:
    path = tmp_path / "build.toml"
    path.write_text("seed = 9\n[verify]\nmax_tasks_per_env = 2\n")
    cfg = load_config(path)
    assert cfg.seed == 9 and cfg.verify.max_tasks_per_env == 2


def test_config_is_frozen() -> None:
    with pytest.raises(ValidationError, match="frozen"):
        BuildConfig().seed = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [(["envgen.max_repairs=-1"], "max_repairs"), (["nosuch.key=1"], "nosuch"), (["runner.kind=mpi"], "kind")],
)
def test_invalid_values_name_the_key(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        load_config(None, overrides)


def test_bad_files_are_clear_errors(tmp_path: Path) -> None:
    broken = tmp_path / "b.yaml"
    broken.write_text("envgen: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid"):
        load_config(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    listing = tmp_path / "l.yaml"
    listing.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(listing)


def test_parse_override_values() -> None:
    assert parse_override("a.b=3") == (["a", "b"], 3)
    assert parse_override("a=hello") == (["a"], "hello")
    assert parse_override('a=["x"]') == (["a"], ["x"])
    with pytest.raises(ConfigError):
        parse_override("novalue")


def test_readme_config_example_loads(repo_root: Path, tmp_path: Path) -> None:
    import re

    block = re.search(r"```yaml\n(.*?)```", (repo_root / "README.md").read_text(), re.S)
    assert block is not None
    path = tmp_path / "build.yaml"
    path.write_text(block.group(1))
    cfg = load_config(path)
    assert cfg.envgen.max_params == 4 and cfg.llm.backend == "openai" and cfg.envgen.llm == cfg.llm


def test_llm_settings_file_then_environment_then_set(tmp_path: Path) -> None:
    path = tmp_path / "build.yaml"
    path.write_text("llm: {backend: openai, base_url: http://file/v1, model: from-file, max_concurrency: 2}\n")
    env = {"GUST_LLM_BASE_URL": "http://env/v1", "GUST_LLM_MAX_CONCURRENCY": "16", "GUST_LLM_REFRESH_ROLES": "codegen"}
    cfg = load_config(path, ["llm.max_concurrency=4"], environ=env)
    assert (cfg.llm.base_url, cfg.llm.model, cfg.llm.max_concurrency) == ("http://env/v1", "from-file", 4)
    assert cfg.llm.refresh_roles == ("codegen",) and cfg.envgen.llm == cfg.llm


def test_openai_backend_reaches_every_role_unless_set_explicitly() -> None:
    cfg = load_config(None, ["llm.backend=openai", "llm.base_url=http://h/v1", "llm.model=m"], environ={})
    assert (cfg.envgen.backend, cfg.tdg.inferer) == ("openai", "llm")
    assert cfg.verify.teacher.base_url == "http://h/v1" and cfg.verify.teacher.model == "m"
    explicit = load_config(None, ["llm.backend=openai", "tdg.inferer=deterministic", "envgen.backend=offline",
                                  "verify.teacher.base_url=null"], environ={})  # fmt: skip
    assert (explicit.envgen.backend, explicit.tdg.inferer, explicit.verify.teacher.enabled) == (
        "offline",
        "deterministic",
        False,
    )
    offline = load_config(None, [], environ={})
    assert (offline.envgen.backend, offline.tdg.inferer, offline.verify.teacher.enabled) == (
        "offline",
        "deterministic",
        False,
    )


def test_default_error_budgets_are_below_one() -> None:
    budgets = BuildConfig().budgets.model_dump()
    assert set(budgets) >= {"ingest", "envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "convert"}
    assert all(value < 1.0 for value in budgets.values())
