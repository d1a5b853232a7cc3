"""Phases 1-4 on the shipped sample, the SLCA previews and a generated pool."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from toucan.config import ArgCheck, PrepareConfig
from toucan.models import DropReason, SampleKind
from toucan.prepare import Prepared, decompose, eligible_turns, filter_rows, prepare
from toucan.rows import RawRow, iter_raw_rows


def _uuids(prepared: Prepared) -> tuple[set[str], set[str], set[str]]:
    return {s.uuid for s in prepared.test}, {s.uuid for s in prepared.rl}, {d.uuid for d in prepared.sft}


class TestSample:
    def test_every_phase_balances(self, prepared_sample: Prepared) -> None:
        assert [r.phase for r in prepared_sample.reports] == ["1_filter", "2_isolate", "3_decompose", "4_partition"]
        assert all(r.balanced for r in prepared_sample.reports)
        r1, r2, r3, r4 = prepared_sample.reports
        assert r1.inputs == 64
        assert r2.inputs == r1.outputs["valid"]
        assert r4.inputs == r2.outputs["training_pool"]
        assert r3.inputs == sum(d.multi_turn for d in prepared_sample.sft) + r4.outputs["rl_multi_turn"]

    def test_each_bad_row_kind_is_dropped_with_its_reason(self, prepared_sample: Prepared) -> None:
        dropped = prepared_sample.reports[0].dropped
        expected = {
            DropReason.UNPARSEABLE_ROW: 1, DropReason.BROKEN_JSON: 1, DropReason.MISSING_TOOLS: 1,
            DropReason.EMPTY_DIALOGUE: 1, DropReason.UNKNOWN_TOOL: 1, DropReason.LOW_QUESTION_QUALITY: 1,
            DropReason.LOW_RESPONSE_QUALITY: 1, DropReason.IRRELEVANT_SUBSET: 1, DropReason.BAD_ARGUMENTS: 1,
            DropReason.NONSTANDARD_TOOL_TOKENS: 1, DropReason.ARGUMENTS_SCHEMA_MISMATCH: 1,
            DropReason.INCOMPLETE_DIALOGUE: 2, DropReason.DUPLICATE_DIALOGUE: 1,
        }  # fmt: skip
        assert dropped == {k.value: v for k, v in expected.items()}
        assert len(prepared_sample.quarantine) == sum(expected.values())

    def test_repairs_are_counted(self, prepared_sample: Prepared) -> None:
        info = prepared_sample.reports[0].info
        assert info["repaired_rows"] == 5
        for code in ("arguments:python_repr", "messages:double_encoded", "tools:from_metadata", "uuid:from_hash"):
            assert info[f"repair:{code}"] == 1

    def test_isolation_no_test_dialogue_in_training(self, prepared_sample: Prepared) -> None:
        test, rl, sft = _uuids(prepared_sample)
        assert test and rl and sft
        assert not test & rl and not test & sft and not rl & sft
        test_hashes = {s.dialogue_hash for s in prepared_sample.test}
        train_hashes = {s.dialogue_hash for s in prepared_sample.rl} | {d.dialogue_hash for d in prepared_sample.sft}
        assert not test_hashes & train_hashes

    def test_test_set_scaled_to_small_pool(self, prepared_sample: Prepared) -> None:
        kinds = [s.kind for s in prepared_sample.test]
        assert kinds.count(SampleKind.NATIVE_SINGLE_TURN) == 2  # max(1, round(3000 * 50 / 78241))
        assert kinds.count(SampleKind.DECOMPOSED_MULTI_TURN) == 1

    def test_rl_samples_carry_nested_gold_with_arguments(self, prepared_sample: Prepared) -> None:
        for sample in prepared_sample.rl + prepared_sample.test:
            assert sample.gold_steps
            assert all(c.arguments is not None for step in sample.gold_steps for c in step.calls)
            if sample.kind is SampleKind.DECOMPOSED_MULTI_TURN:
                assert sample.turn_index >= 1 and len(sample.history) == sample.turn_index

    def test_deterministic(self, toucan_sample: Path, prepared_sample: Prepared) -> None:
        again = prepare(iter_raw_rows(toucan_sample), PrepareConfig())
        assert again.test == prepared_sample.test and again.rl == prepared_sample.rl
        other = prepare(iter_raw_rows(toucan_sample), PrepareConfig(seed=1))
        assert {s.sample_id for s in other.rl} != {s.sample_id for s in prepared_sample.rl}


class TestDecomposition:
    def test_start_turn_paper_vs_every_turn(self, prepared_sample: Prepared) -> None:
        multi = next(d for d in prepared_sample.sft if len(d.turns) >= 2 and d.turns[0].has_calls)
        paper = decompose(multi, start_turn=2)
        every = decompose(multi, start_turn=1)
        assert [s.turn_index for s in every] == eligible_turns(multi, 1)
        assert len(every) == len(paper) + 1 and 0 not in [s.turn_index for s in paper]
        last = every[-1]
        assert last.history == multi.turns[: last.turn_index] and last.question == multi.turns[last.turn_index].user


class TestPreviewsEndToEnd:
    def test_sft_preview(self, preview_dir: Path) -> None:
        prepared = prepare(iter_raw_rows(preview_dir / "toucan_toolcall_sft.preview.jsonl"), PrepareConfig())
        assert all(r.balanced for r in prepared.reports)
        assert prepared.reports[0].outputs == {"valid": 5}
        assert len(prepared.test) == 1 and len(prepared.rl) + len(prepared.sft) == 4

    def test_rl_preview_rows_lack_gold_arguments(self, preview_dir: Path) -> None:
        prepared = prepare(iter_raw_rows(preview_dir / "toucan_toolcall_rl.preview.jsonl"), PrepareConfig())
        assert prepared.reports[0].dropped == {"gold_arguments_missing": 2, "irrelevant_subset": 3}
        assert all(r.balanced for r in prepared.reports)


class TestGeneratedPool:
    @pytest.fixture(scope="class")
    def big(self, toucan_factory: ModuleType) -> Prepared:
        rows = [RawRow(i, r) for i, r in enumerate(toucan_factory.bench_rows(1500, seed=3))]
        return prepare(rows, PrepareConfig(reference_pool_size=2000, test_single_turn=300, test_multi_turn=100))

    def test_ratios(self, big: Prepared) -> None:
        r4 = big.reports[3]
        assert abs(r4.info["rl_samples"] / r4.inputs - 0.43) < 0.01
        assert abs(r4.info["rl_native_single_turn"] / r4.info["rl_samples"] - 2 / 3) < 0.02
        kinds = [s.kind for s in big.test]
        n = big.reports[1].inputs
        assert kinds.count(SampleKind.NATIVE_SINGLE_TURN) == round(300 * n / 2000)
        assert kinds.count(SampleKind.DECOMPOSED_MULTI_TURN) == round(100 * n / 2000)
        assert len({s.dialogue_hash for s in big.test}) == len(big.test)  # distinct dialogues
        assert all(r.balanced for r in big.reports)

    def test_isolation(self, big: Prepared) -> None:
        test, rl, sft = _uuids(big)
        assert not test & (rl | sft) and not rl & sft


def test_full_arg_check_uses_jsonschema(toucan_factory: ModuleType) -> None:
    import random

    row = toucan_factory.good_row(random.Random(0), 1)
    import json

    messages = json.loads(row["messages"])
    call = next(m for m in messages if m.get("function_call"))["function_call"]
    args = json.loads(call["arguments"])
    call["arguments"] = json.dumps({k: ["wrong", "type"] for k in args})
    bad = RawRow(0, {**row, "messages": json.dumps(messages)})
    assert filter_rows([bad], PrepareConfig(arg_check=ArgCheck.REQUIRED))[0]
    pool, quarantine, _ = filter_rows([bad], PrepareConfig(arg_check=ArgCheck.FULL))
    assert not pool and quarantine[0].reason == DropReason.ARGUMENTS_SCHEMA_MISMATCH
