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
