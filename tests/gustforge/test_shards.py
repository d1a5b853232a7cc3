"""Shards: every item kept in order, merged results summed, input digests that follow content."""

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from data.models import StageReport
from gustforge.shards import ShardResult, inputs_digest, merge_results, shard_items


@given(n=st.integers(0, 500), size=st.integers(1, 100), cap=st.integers(1, 12))
def test_shards_keep_every_item_in_order(n: int, size: int, cap: int) -> None:
    items = [{"i": i} for i in range(n)]
    shards = shard_items(items, shard_size=size, max_shards=cap)
    assert [x for shard in shards for x in shard] == items
    assert len(shards) <= cap
    assert all(shards)


def test_merge_sums_reports_and_keeps_order() -> None:
    def result(shard: int, produced: int, dropped: dict[str, int]) -> ShardResult:
        report = StageReport(stage="tdg", inputs=produced + sum(dropped.values()), produced=produced, dropped=dropped)
        return ShardResult(
            stage="tdg", shard=shard, items=tuple({"s": shard, "k": k} for k in range(produced)), report=report
        )

    merged = merge_results("tdg", [result(0, 2, {"a": 1}), result(1, 1, {"a": 2, "b": 1})])
    assert merged.report == StageReport(stage="tdg", inputs=7, produced=3, dropped={"a": 3, "b": 1})
    assert [i["s"] for i in merged.items] == [0, 0, 1]


def test_inputs_digest_changes_with_content(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_text("[]")
    before = inputs_digest([tmp_path])
    f.write_text("[ ]")
    assert inputs_digest([tmp_path]) != before
