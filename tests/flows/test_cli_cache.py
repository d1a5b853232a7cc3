"""`gust cache merge` / `gust cache info` on real SQLite cache files, through the CLI."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from flows.cli import app
from gustforge.llm.cache import ResponseCache


def _cache(path: Path, entries: dict[str, dict[str, str]]) -> Path:
    with ResponseCache(path) as cache:
        for key, value in entries.items():
            cache.put(key, value)
    return path


def _text(result: object) -> str:
    return " ".join(result.output.split())  # type: ignore[attr-defined]


def test_per_node_caches_merge_into_the_shared_one(tmp_path: Path) -> None:
    node_a = _cache(tmp_path / "a.sqlite", {"k1": {"content": "one"}, "k2": {"content": "two"}})
    node_b = _cache(tmp_path / "b.sqlite", {"k3": {"content": "three"}})
    shared = _cache(tmp_path / "out" / "cache" / "llm.sqlite", {"k0": {"content": "zero"}})
    result = CliRunner().invoke(app, ["cache", "merge", str(shared), str(node_a), str(node_b)])
    assert result.exit_code == 0, _text(result)
    assert "merged 3 entries from 2 file(s)" in _text(result) and "(4 entries now)" in _text(result)
    with ResponseCache(shared) as merged:
        assert [merged.get(k) for k in ("k0", "k1", "k3")] == [{"content": w} for w in ("zero", "one", "three")]
    info = CliRunner().invoke(app, ["cache", "info", str(shared)])
    assert info.exit_code == 0 and "4 entries" in _text(info)


def test_a_bad_source_merges_nothing_and_says_which(tmp_path: Path) -> None:
    good = _cache(tmp_path / "good.sqlite", {"k1": {"content": "one"}})
    notes = tmp_path / "notes.sqlite"
    notes.write_text("not a database\n" * 200)
    target = tmp_path / "shared.sqlite"
    for bad, why in ((notes, "not a gust LLM cache"), (tmp_path / "missing.sqlite", "no such cache file")):
        result = CliRunner().invoke(app, ["cache", "merge", str(target), str(good), str(bad)])
        assert result.exit_code == 2 and why in _text(result) and bad.name in _text(result), _text(result)
        assert "nothing was merged" in _text(result)
        assert not target.exists()  # every source is read before the target is created
    same = CliRunner().invoke(app, ["cache", "merge", str(good), str(good)])
    assert same.exit_code == 2 and "both the target and a source" in _text(same)
    assert CliRunner().invoke(app, ["cache", "info", str(notes)]).exit_code == 2
