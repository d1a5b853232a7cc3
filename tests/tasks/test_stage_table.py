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
