"""The stage table: stages in build order, each reading its predecessor, cache keys that follow only its config."""

from gustforge.config import load_config
from tasks.stage_table import STAGE_ORDER, STAGES, stage_config_key


def test_editing_one_stage_config_keeps_upstream_keys() -> None:
    base = load_config(None, [])
    edited = load_config(None, ["verify.max_tasks_per_env=3"])
    keys = {s: (stage_config_key(s, base), stage_config_key(s, edited)) for s in STAGE_ORDER}
    unchanged = [s for s, (a, b) in keys.items() if a == b]
    assert unchanged == ["envgen", "tdg", "sample", "reconstruct", "tasks", "quality", "export", "convert"]
    tdg_edit = load_config(None, ["tdg.max_stages=3"])
    assert stage_config_key("envgen", tdg_edit) == stage_config_key("envgen", base)
    assert stage_config_key("sample", tdg_edit) != stage_config_key("sample", base)


def test_each_stage_reads_the_one_before_it() -> None:
    assert STAGE_ORDER == ("envgen", "tdg", "sample", "reconstruct", "tasks", "verify", "quality", "export", "convert")
    assert [STAGES.get(s).previous for s in STAGE_ORDER] == [None, *STAGE_ORDER[:-1]]
    assert "undetermined_pick" in STAGES.get("quality").policy and "undetermined_pick" not in STAGES.get("tasks").policy


def test_only_dataset_wide_stages_see_every_item_at_once() -> None:
    assert [s for s in STAGE_ORDER if STAGES.get(s).dataset_wide] == ["quality", "export"]


def test_the_cli_offers_every_stage_of_the_table() -> None:
    from flows.cli import STAGE_NAMES

    assert STAGE_NAMES == STAGE_ORDER


def test_a_cached_result_is_served_only_while_its_outputs_are_on_disk(tmp_path) -> None:
    from data.models import StageReport
    from gustforge.shards import ShardResult
    from tasks.stage_table import needs_rerun, upstream_key

    (tmp_path / "verl").mkdir()
    (tmp_path / "verl" / "train.parquet").write_bytes(b"45 rows")
    from gustforge.outputs import record_outputs

    report = StageReport(stage="convert", inputs=45, produced=45)
    result = ShardResult(stage="convert", shard=0, report=report,
                         outputs=record_outputs(tmp_path, STAGES.get("convert").files))  # fmt: skip
    assert needs_rerun("convert", result, tmp_path, cached=True) == []
    (tmp_path / "verl" / "train.parquet").write_bytes(b"24 rows")  # another config's build wrote here
    assert needs_rerun("convert", result, tmp_path, cached=True) == [
        "outputs changed or missing on disk: verl/train.parquet"]  # fmt: skip
    legacy = result.model_copy(update={"outputs": None})  # cached before digests were recorded
    assert needs_rerun("convert", legacy, tmp_path) and not needs_rerun("sample", legacy, tmp_path)
    before = upstream_key("export", tmp_path)
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "quality.json").write_text("{}")  # export's card reads it: its cache key follows
    assert upstream_key("export", tmp_path) != before and upstream_key("quality", tmp_path) == upstream_key(
        "envgen", tmp_path)


def test_items_dropped_on_unusable_replies_are_asked_again_by_the_next_build(tmp_path) -> None:
    from data.models import QuarantineRecord, StageReport
    from gustforge.shards import ShardResult
    from tasks.stage_table import needs_rerun

    bad = QuarantineRecord(item_id="t1", stage="envgen", reason="llm_codegen_failed", detail="not JSON")
    policy = QuarantineRecord(item_id="t2", stage="envgen", reason="too_many_tools")
    report = StageReport(stage="envgen", inputs=2, produced=0, dropped={"llm_codegen_failed": 1, "too_many_tools": 1})
    result = ShardResult(stage="envgen", shard=0, quarantine=(bad, policy), report=report, outputs={})
    assert needs_rerun("envgen", result, tmp_path, cached=False) == []  # this build asked already
    assert needs_rerun("envgen", result, tmp_path, cached=True) == [
        "1 item(s) dropped on unusable LLM replies in an earlier build; asking again"]  # fmt: skip
    only_policy = result.model_copy(update={"quarantine": (policy,)})
    assert needs_rerun("envgen", only_policy, tmp_path, cached=True) == []
