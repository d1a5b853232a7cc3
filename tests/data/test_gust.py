"""GUST export: parquet round trip through read_gust, pandas and datasets; determinism; card; figure."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from datasets import load_dataset

from data.gust import gust_features, read_gust, record_to_row, update_quality, write_gust
from data.models import GoldenTrace
from gustforge.errors import InputError
from tests.data._gust_fixtures import make_record

FILTERS = {"replay": True, "solvability": True, "teacher_pass_at_k": False, "env_cap": True}


@pytest.fixture()
def records():
    return [make_record(i, env_id="env_b" if i % 2 else "env_a", pass_at_k=None) for i in range(5)]


def _sorted(records):
    return sorted(records, key=lambda r: (r.env_id, r.task_id))


class TestWriteGust:
    def test_read_gust_round_trip_is_exact(self, tmp_path, records):
        out = write_gust(list(reversed(records)), tmp_path / "gust", seed=3, filters_run=FILTERS)
        assert read_gust(out) == _sorted(records)

    def test_pandas_reads_the_same_rows(self, tmp_path, records):
        out = write_gust(records, tmp_path / "gust", seed=3, filters_run=FILTERS)
        frame = pd.read_parquet(out / "data")
        assert list(frame.columns) == list(gust_features())
        assert list(frame["task_id"]) == [r.task_id for r in _sorted(records)]
        first = _sorted(records)[0]
        assert GoldenTrace.model_validate_json(frame["golden_trace"].iloc[0]) == first.trace
        assert json.loads(frame["dialogue_history"].iloc[0]) == [dict(t) for t in first.text.dialogue_history]
        assert frame["pass_at_k"].isna().all()

    def test_datasets_load_dataset_returns_the_rows(self, tmp_path, records):
        records = [*records[:3], make_record(9, pass_at_k=0.375)]
        out = write_gust(records, tmp_path / "gust", seed=3, filters_run=FILTERS)
        ds = load_dataset(str(out), split="train", cache_dir=str(tmp_path / "cache"))
        assert ds.features == gust_features()
        assert ds.to_list() == [record_to_row(r) for r in _sorted(records)]
        by_id = {row["task_id"]: row for row in ds}
        assert by_id[records[-1].task_id]["pass_at_k"] == 0.375
        assert by_id[records[0].task_id]["pass_at_k"] is None

    def test_same_input_gives_identical_bytes(self, tmp_path, records):
        one = write_gust(records, tmp_path / "one", seed=3, filters_run=FILTERS)
        two = write_gust(list(reversed(records)), tmp_path / "two", seed=3, filters_run=FILTERS)
        for name in ("data/train-00000-of-00001.parquet", "README.md", "stats.png"):
            assert (one / name).read_bytes() == (two / name).read_bytes(), name

    def test_shards_and_stale_shards_removed(self, tmp_path, records):
        out = tmp_path / "gust"
        write_gust(records, out, seed=0, filters_run=FILTERS, max_rows_per_shard=2)
        names = sorted(p.name for p in (out / "data").iterdir())
        assert names == [f"train-0000{i}-of-00003.parquet" for i in range(3)]
        write_gust(records, out, seed=0, filters_run=FILTERS)
        assert sorted(p.name for p in (out / "data").iterdir()) == ["train-00000-of-00001.parquet"]
        assert read_gust(out) == _sorted(records)

    def test_duplicate_task_ids_rejected(self, tmp_path, records):
        with pytest.raises(InputError, match="duplicate task_id"):
            write_gust([records[0], records[0]], tmp_path / "gust", seed=0, filters_run=FILTERS)

    def test_empty_export_is_loadable(self, tmp_path):
        out = write_gust([], tmp_path / "gust", seed=0, filters_run=FILTERS)
        assert read_gust(out) == []
        assert len(pd.read_parquet(out / "data")) == 0


class TestCardAndFigure:
    def test_card_header_and_filters(self, tmp_path, records):
        out = write_gust(records, tmp_path / "gust", seed=41, filters_run=FILTERS)
        card = (out / "README.md").read_text(encoding="utf-8")
        header = yaml.safe_load(card.split("---\n")[1])
        assert header["license"] == "other"  # no environment manifests here: the inputs' licenses are unknown
        assert header["size_categories"] == ["n<1K"]
        assert header["task_categories"] == ["text-generation"]
        assert header["configs"][0]["data_files"] == [{"split": "train", "path": "data/train-*"}]
        assert "`teacher_pass_at_k` — **NOT run**" in card
        assert "`replay` — **ran**" in card
        assert "did **not** run for any task" in card
        assert "| tasks | 5 |" in card and "| environments | 2 |" in card
        assert "Build seed: `41`" in card
        assert "![statistics](stats.png)" in card

    def test_card_reports_pass_at_k_when_teacher_ran(self, tmp_path):
        recs = [make_record(i, pass_at_k=p) for i, p in enumerate([0.25, 1.0])]
        out = write_gust(recs, tmp_path / "gust", seed=0, filters_run={**FILTERS, "teacher_pass_at_k": True})
        card = (out / "README.md").read_text(encoding="utf-8")
        assert "| pass@k (unbiased) | mean 0.62, min 0.25, max 1 |" in card
        assert "did **not** run for any task" not in card

    def test_solve_rate_is_its_own_column(self, tmp_path):
        rec = make_record(1, pass_at_k=1.0).model_copy(update={"solve_rate": 0.25})
        out = write_gust([rec], tmp_path / "gust", seed=0, filters_run=FILTERS)
        (back,) = read_gust(out)
        assert back.pass_at_k == 1.0 and back.solve_rate == 0.25
        assert "| solve rate | mean 0.25, min 0.25, max 0.25 |" in (out / "README.md").read_text(encoding="utf-8")

    def test_card_states_when_templates_wrote_the_data(self, tmp_path):
        provenance = {"role:tasks": "offline (deterministic templates)", "role:graphs": "openai:judge-model"}
        rec = make_record(1).model_copy(update={"provenance": provenance})
        card = (write_gust([rec], tmp_path / "g", seed=0, filters_run=FILTERS) / "README.md").read_text("utf-8")
        assert "| tasks | offline (deterministic templates) | 1 |" in card
        assert "| graphs | openai:judge-model | 1 |" in card and "| db | not recorded | 1 |" in card
        assert "Deterministic templates, not a language model, wrote the parts marked `offline`" in card

    def test_quality_table_and_panel(self, tmp_path):
        report = {"embedder": "minilm", "dropped": {"noop_write": 2},
                  "dataset": {"tasks": 5, "single_stage_share": 0.2, "noop_write_task_share": 0.0},
                  "targets": [{"metric": "single_stage_share", "value": 0.2, "target": "<=0.10", "met": False}]}
        recs = [make_record(1)]
        plain = write_gust(recs, tmp_path / "a", seed=0, filters_run=FILTERS)
        measured = write_gust(recs, tmp_path / "b", seed=0, filters_run=FILTERS, quality_report=report)
        card = (measured / "README.md").read_text("utf-8")
        assert "| single-stage tasks (no dependency used) | 0.2 | <=0.10 ✗ missed |" in card
        assert "`noop_write` 2" in card and "measured with: minilm" in card
        assert "Quality was **not measured**" in (plain / "README.md").read_text("utf-8")
        assert (plain / "stats.png").read_bytes() != (measured / "stats.png").read_bytes()
        update_quality(plain, recs, report)  # `gust quality` replaces the section in place
        assert (plain / "README.md").read_text("utf-8").count("## Quality") == 1
        assert "<=0.10 ✗ missed" in (plain / "README.md").read_text("utf-8")

    def test_figure_is_a_png_and_shows_the_teacher_panel(self, tmp_path):
        not_run = write_gust([make_record(1)], tmp_path / "a", seed=0, filters_run=FILTERS) / "stats.png"
        ran = write_gust([make_record(1, pass_at_k=0.5)], tmp_path / "b", seed=0, filters_run=FILTERS) / "stats.png"
        for png in (not_run, ran):
            assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and png.stat().st_size > 10_000
        assert not_run.read_bytes() != ran.read_bytes()


class TestHeldOutSplit:
    @pytest.fixture()
    def many(self):
        return [make_record(i, env_id=f"env_{i % 5}", pass_at_k=None) for i in range(10)]

    def test_test_split_holds_out_whole_environments_in_the_hub_layout(self, tmp_path, many):
        out = write_gust(many, tmp_path / "gust", seed=3, filters_run=FILTERS, heldout_fraction=0.4)
        names = sorted(p.name for p in (out / "data").iterdir())
        assert names == ["test-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
        train, test = read_gust(out, split="train"), read_gust(out, split="test")
        assert {r.env_id for r in train}.isdisjoint({r.env_id for r in test})
        assert len({r.env_id for r in test}) == 2 and len(train) + len(test) == len(many)
        assert sorted(read_gust(out), key=lambda r: r.task_id) == sorted(many, key=lambda r: r.task_id)
        ds = load_dataset(str(out), cache_dir=str(tmp_path / "cache"))
        assert set(ds) == {"train", "test"} and sorted(ds["test"]["task_id"]) == sorted(r.task_id for r in test)
        card = (out / "README.md").read_text(encoding="utf-8")
        header = yaml.safe_load(card.split("---")[1])
        assert [f["split"] for f in header["configs"][0]["data_files"]] == ["train", "test"]
        assert "## Splits" in card and "holds out whole environments" in card

    def test_the_split_is_seeded(self, tmp_path, many):
        def held(name: str, **kwargs) -> set[str]:
            out = write_gust(many, tmp_path / name, seed=3, filters_run=FILTERS, heldout_fraction=0.4, **kwargs)
            return {r.env_id for r in read_gust(out, split="test")}

        assert held("a") == held("b") == held("c", split_seed=3)
        assert len({frozenset(held(f"s{s}", split_seed=s)) for s in range(6)}) > 1

    def test_no_fraction_or_one_environment_writes_train_only(self, tmp_path, many, records):
        out = write_gust(many, tmp_path / "off", seed=3, filters_run=FILTERS)
        assert [p.name for p in (out / "data").iterdir()] == ["train-00000-of-00001.parquet"]
        assert read_gust(out, split="test") == []
        one = [make_record(i, env_id="env_a", pass_at_k=None) for i in range(3)]
        out = write_gust(one, tmp_path / "one", seed=3, filters_run=FILTERS, heldout_fraction=0.5)
        assert [p.name for p in (out / "data").iterdir()] == ["train-00000-of-00001.parquet"]
        assert "No held-out split" in (out / "README.md").read_text(encoding="utf-8")

    def test_a_stale_test_split_is_removed(self, tmp_path, many):
        out = write_gust(many, tmp_path / "gust", seed=3, filters_run=FILTERS, heldout_fraction=0.4)
        write_gust(many, out, seed=3, filters_run=FILTERS)
        assert read_gust(out, split="test") == [] and len(read_gust(out)) == len(many)
