"""The GUST dataset export: parquet shards with explicit `datasets.Features`, a dataset card and a statistics figure.

Nested values whose shape differs from row to row (golden traces, dialogue turns, provenance) are stored as JSON
text with explicit Features (pattern A of the orchestration probe), so pandas, pyarrow and `datasets` all read the
files and the round trip is exact. Rows are sorted by (env_id, task_id) and the parquet bytes depend only on the
records, so the same input always gives byte-identical shards.
"""

from __future__ import annotations

import io
import json
import logging
import random
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from datasets import Features, List, Value
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from pydantic import Field

from data.config import ExportConfig
from data.io import atomic_write_bytes, atomic_write_text
from data.models import GoldenTrace, StrictModel, TaskRecord, TaskText
from gustforge.errors import InputError
from gustforge.hashing import canonical_json

__all__ = [
    "GUST_COLUMNS",
    "gust_features",
    "record_to_row",
    "row_to_record",
    "write_gust",
    "ExportConfig",
    "split_by_environment",
    "SPLITS",
    "read_gust",
    "shard_names",
    "render_card",
    "render_stats_figure",
    "render_quality_section",
    "update_quality",
    "ROLE_NAMES",
    "read_funnel",
    "FunnelStep",
    "Source",
    "sources_of",
    "card_license",
    "license_near",
    "REPO_PLACEHOLDER",
]

logger = logging.getLogger(__name__)

_DATA_DIR = "data"
_SHARD_GLOB = "train-*-of-*.parquet"
SPLITS = ("train", "test")  # hub layout: data/train-*.parquet, data/test-*.parquet (held-out environments)

# (column, datasets feature, description) — the single source for the Features and the card's column table.
GUST_COLUMNS: tuple[tuple[str, Value | List, str], ...] = (
    ("task_id", Value("string"), "Content hash of the golden trace and task text."),
    ("env_id", Value("string"), "Executable environment the task runs in (`OUT/envs/<env_id>/`)."),
    ("tools", List(Value("string")), "Names of all tools the environment offers to the agent."),
    ("tool_schemas", Value("string"), "JSON list of the OpenAI function-calling schemas of `tools` (same order)."),
    ("user_query", Value("string"), "The user-facing task."),
    ("dialogue_history", Value("string"), "JSON list of `{role, content}` turns preceding the task."),
    ("reasoning_chain", List(Value("string")), "Step-by-step plan linking the calls (annotation, not shown)."),
    ("expected_answer", List(Value("string")), "Facts (from the gold outputs) the agent's final reply must contain."),
    ("golden_trace", Value("string"), "JSON `GoldenTrace`: stages of calls with arguments, outputs, DB hashes."),
    ("edges_used", List(List(Value("string"))), "Tool dependency edges `[src, dst]` the trace exercises."),
    ("graph_complexity", Value("int64"), "Calls plus dependency edges of the trace subgraph."),
    ("num_stages", Value("int64"), "Number of stages (turns) in the golden trace."),
    ("num_calls", Value("int64"), "Number of tool calls in the golden trace."),
    ("coverage", Value("float64"), "Distinct tools used by the trace / tools in the environment."),
    ("replay_ok", Value("bool"), "Golden trace re-executed on a fresh environment with identical outputs and DB."),
    (
        "solvable",
        Value("bool"),
        "Determined: every argument is stated in the text or derived through the trace "
        "without a free choice (list picks are singled out by a stated attribute or rule).",
    ),
    ("teacher_status", Value("string"), "One of not_run, passed, failed, teacher_error."),
    (
        "pass_at_k",
        Value("float64"),
        "Unbiased pass@k (Chen et al. 2021) over the teacher's n attempts; null when not run.",
    ),
    ("solve_rate", Value("float64"), "Solved teacher attempts / attempts (c / n); null when not run."),
    ("trace_id", Value("string"), "Id of the golden trace."),
    ("initial_db_hash", Value("string"), "Content hash of the environment DB before the trace."),
    ("final_db_hash", Value("string"), "Content hash of the environment DB after the trace."),
    (
        "provenance",
        Value("string"),
        "JSON map of input content hashes (toolset, schemas, tools source) and, under "
        "`role:<part>`, the backend and model that produced each part (`offline` = deterministic templates).",
    ),
    ("seed", Value("int64"), "Seed the task was sampled with."),
)

_FILTER_TEXT = {
    "replay": "Golden trace replayed stage by stage on a fresh environment (LangGraph); outputs and DB hashes match.",
    "solvability": "Determined: every stated argument value appears in the task text or an earlier tool output, and "
    "every value picked from a list is singled out by a stated attribute or rule.",
    "teacher_pass_at_k": "A teacher agent (LangGraph, OpenAI-compatible endpoint) solved the task in >= 1 of k tries.",
    "env_cap": "At most N tasks per environment, preferring distinct tool sets.",
    "quality": "Tasks with a hard quality failure (undetermined pick, no-op write, write after a terminal state, "
    "conflicting parallel stage, leaked steps, placeholder value, echo-only calls) were dropped; see Quality.",
}

ROLE_NAMES = ("schemas", "db", "code", "graphs", "tasks", "verification")
_QUALITY_START, _QUALITY_END = "<!-- quality:start -->", "<!-- quality:end -->"

_SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))


def gust_features() -> Features:
    """The explicit `datasets.Features` of a GUST shard (a fresh object: Features is mutable)."""
    return Features({name: feature for name, feature, _ in GUST_COLUMNS})


def _tools_used(trace: GoldenTrace) -> set[str]:
    return {call.name for stage in trace.stages for call in stage.calls}


def record_to_row(record: TaskRecord, tool_schemas: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Flatten a `TaskRecord` into one GUST row (nested values as canonical JSON text).

    `tool_schemas`: the OpenAI function schemas of the record's environment (`schemas.json`); null when unknown.
    """
    trace = record.trace
    used = _tools_used(trace)
    return {
        "task_id": record.task_id,
        "env_id": record.env_id,
        "tools": list(record.tools),
        "tool_schemas": canonical_json(list(tool_schemas)) if tool_schemas is not None else None,
        "user_query": record.text.user_query,
        "dialogue_history": canonical_json([dict(turn) for turn in record.text.dialogue_history]),
        "reasoning_chain": list(record.text.reasoning_chain),
        "expected_answer": list(record.text.expected_answer),
        "golden_trace": canonical_json(trace.model_dump(mode="json")),
        "edges_used": [list(edge) for edge in trace.edges_used],
        "graph_complexity": record.graph_complexity,
        "num_stages": len(trace.stages),
        "num_calls": sum(len(stage.calls) for stage in trace.stages),
        "coverage": len(used) / len(record.tools) if record.tools else 0.0,
        "replay_ok": record.replay_ok,
        "solvable": record.solvable,
        "teacher_status": record.teacher_status,
        "pass_at_k": record.pass_at_k,
        "solve_rate": record.solve_rate,
        "trace_id": trace.trace_id,
        "initial_db_hash": trace.initial_db_hash,
        "final_db_hash": trace.final_db_hash,
        "provenance": canonical_json(record.provenance),
        "seed": record.seed,
    }


def row_to_record(row: Mapping[str, Any]) -> TaskRecord:
    """Rebuild the `TaskRecord` of a GUST row (derived columns are ignored)."""
    text = TaskText(
        user_query=row["user_query"],
        dialogue_history=tuple(json.loads(row["dialogue_history"])),
        reasoning_chain=tuple(row["reasoning_chain"]),
        expected_answer=tuple(row.get("expected_answer") or ()),
    )
    return TaskRecord(
        task_id=row["task_id"],
        env_id=row["env_id"],
        text=text,
        trace=GoldenTrace.model_validate_json(row["golden_trace"]),
        tools=tuple(row["tools"]),
        graph_complexity=int(row["graph_complexity"]),
        replay_ok=row["replay_ok"],
        solvable=row["solvable"],
        teacher_status=row["teacher_status"],
        pass_at_k=row["pass_at_k"],
        solve_rate=row.get("solve_rate"),
        seed=int(row["seed"]),
        provenance=json.loads(row["provenance"]),
    )


def shard_names(num_shards: int, split: str = "train") -> list[str]:
    """Hub-style shard paths, e.g. `data/train-00000-of-00002.parquet`, `data/test-00000-of-00001.parquet`."""
    return [f"{_DATA_DIR}/{split}-{i:05d}-of-{num_shards:05d}.parquet" for i in range(num_shards)]


def split_by_environment(
    records: Iterable[TaskRecord], *, heldout_fraction: float = 0.2, seed: int = 0
) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """Split tasks into (train, held-out) by environment: no environment has tasks on both sides.

    Args:
        records: GUST tasks.
        heldout_fraction: Share of environments held out (at least one when there are two or more).
        seed: Seed of the environment shuffle (same inputs and seed → same split).

    Returns:
        (train, held-out), each in input order.
    """
    if not 0 < heldout_fraction < 1:
        raise InputError(f"heldout_fraction must lie in (0, 1), got {heldout_fraction}")
    records = list(records)
    envs = sorted({r.env_id for r in records})
    random.Random(seed).shuffle(envs)
    count = min(len(envs) - 1, max(1, round(heldout_fraction * len(envs)))) if len(envs) > 1 else 0
    heldout = set(envs[:count])
    return [r for r in records if r.env_id not in heldout], [r for r in records if r.env_id in heldout]


def _parquet_bytes(rows: Sequence[Mapping[str, Any]]) -> bytes:
    table = pa.Table.from_pylist(list(rows), schema=gust_features().arrow_schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def write_gust(
    records: Iterable[TaskRecord],
    out_dir: Path,
    *,
    seed: int,
    filters_run: Mapping[str, bool],
    max_rows_per_shard: int = 10_000,
    license_id: str | None = None,
    pretty_name: str = "GUST (GUST Forge synthetic long-horizon tool-use tasks)",
    quality_report: Path | Mapping[str, Any] | None = None,
    envs_dir: Path | None = None,
    heldout_fraction: float = 0.0,
    split_seed: int | None = None,
) -> Path:
    """Write the GUST dataset folder: `data/train-*.parquet` (+ `data/test-*.parquet`), `README.md`, `stats.png`.

    Args:
        records: Verified task records (any order; duplicates by task_id are an error).
        out_dir: Dataset folder; stale shards from an earlier export are removed.
        seed: Build seed, recorded in the card.
        filters_run: Filter name -> whether it ran (e.g. `{"replay": True, "teacher_pass_at_k": False}`).
        max_rows_per_shard: Rows per parquet shard.
        license_id: License id for the card header; None = derived from the inputs' licenses (see `sources_of`).
        pretty_name: Dataset title for the card.
        quality_report: `reports/quality.json` (path or loaded) for the card's quality table and figure panel.
        envs_dir: The run's environments (`OUT/envs`, the default when it exists beside `out_dir`): gives every
            row its `tool_schemas` and the card its sources.
        heldout_fraction: > 0 holds out that share of environments as the `test` split (`split_by_environment`,
            seeded with `split_seed`, default `seed`); 0 writes a train split only.

    Returns:
        `out_dir`.

    Raises:
        InputError: Two records share a task_id, or `max_rows_per_shard` < 1.
    """
    if max_rows_per_shard < 1:
        raise InputError(f"max_rows_per_shard must be >= 1, got {max_rows_per_shard}")
    ordered = sorted(records, key=lambda r: (r.env_id, r.task_id))
    duplicates = [tid for tid, n in Counter(r.task_id for r in ordered).items() if n > 1]
    if duplicates:
        raise InputError(f"duplicate task_id(s) in export: {sorted(duplicates)[:5]}")
    out_dir = Path(out_dir)
    for split in SPLITS:
        for stale in (out_dir / _DATA_DIR).glob(f"{split}-*-of-*.parquet"):
            stale.unlink()
    envs_dir = Path(envs_dir) if envs_dir is not None else out_dir.parent / "envs"
    envs = _env_info(envs_dir, {r.env_id for r in ordered})
    split_seed = seed if split_seed is None else split_seed
    if heldout_fraction > 0 and len({r.env_id for r in ordered}) > 1:
        train, test = split_by_environment(ordered, heldout_fraction=heldout_fraction, seed=split_seed)
    else:
        train, test = ordered, []
    rows = 0
    for split, part in (("train", train), ("test", test)):
        if split == "test" and not part:
            continue
        split_rows = [record_to_row(r, envs[r.env_id]["schemas"] if r.env_id in envs else None) for r in part]
        chunks = [split_rows[i : i + max_rows_per_shard] for i in range(0, len(split_rows), max_rows_per_shard)]
        for name, chunk in zip(shard_names(len(chunks or [[]]), split), chunks or [[]], strict=True):
            atomic_write_bytes(out_dir / name, _parquet_bytes(chunk))
        rows += len(split_rows)
    quality = _load_quality(quality_report)
    card = render_card(ordered, seed=seed, filters_run=filters_run, license_id=license_id, pretty_name=pretty_name,
                       sources=sources_of(ordered, envs), makers=_makers(ordered, envs),
                       splits={"train": train, "test": test}, split_seed=split_seed)  # fmt: skip
    atomic_write_text(out_dir / "README.md", _with_quality(card, quality))
    funnel = read_funnel(out_dir.parent / "reports")
    atomic_write_bytes(out_dir / "stats.png", render_stats_figure(ordered, quality, funnel))
    logger.info("wrote %d GUST rows (%d train, %d held-out test) to %s", rows, len(train), len(test), out_dir)
    return out_dir


def read_gust(folder: Path, split: str | None = None) -> list[TaskRecord]:
    """Read the shards of a GUST folder (or a folder of shards) back into `TaskRecord`s, in file order.

    Args:
        folder: A GUST folder (`data/<split>-*.parquet`) or a folder of shards.
        split: "train" or "test" (the held-out environments); None = every split, train first.

    Raises:
        InputError: No shard found (for `split`: no train shard; a missing test split reads as empty).
    """
    folder = Path(folder)
    shards = []
    for name in SPLITS if split is None else (split,):
        pattern = f"{name}-*-of-*.parquet"
        shards += sorted((folder / _DATA_DIR).glob(pattern)) or sorted(folder.glob(pattern))
    if not shards and split != "test":
        raise InputError(f"no GUST shards ({_SHARD_GLOB}) under {folder}")
    return [row_to_record(row) for shard in shards for row in pq.read_table(shard).to_pylist()]


# ----------------------------------------------------------------------------------------------- dataset card


def _size_category(n: int) -> str:
    return next((label for bound, label in _SIZE_CATEGORIES if n < bound), "n>1M")


def _summary(values: Sequence[float]) -> str:
    if not values:
        return "–"
    return f"mean {statistics.fmean(values):.2f}, min {min(values):g}, max {max(values):g}"


def _env_tool_counts(records: Sequence[TaskRecord]) -> dict[str, int]:
    return {r.env_id: len(r.tools) for r in records}


def _card_header(n: int, license_id: str, pretty_name: str, splits: Sequence[str] = ("train",)) -> str:
    header: dict[str, Any] = {"license": license_id}
    if license_id == "other":
        header["license_name"] = "mixed-or-unknown"
        header["license_link"] = "README.md"  # the card's "Sources and licenses" section lists each input's license
    header |= {
        "pretty_name": pretty_name,
        "language": ["en"],
        "size_categories": [_size_category(n)],
        "task_categories": ["text-generation"],
        "tags": ["tool-use", "function-calling", "agents", "synthetic", "reinforcement-learning"],
        "configs": [
            {
                "config_name": "default",
                "data_files": [{"split": split, "path": f"{_DATA_DIR}/{split}-*"} for split in splits],
            }
        ],
    }
    return "---\n" + yaml.safe_dump(header, sort_keys=False, allow_unicode=True) + "---\n"


def _stats_lines(records: Sequence[TaskRecord]) -> list[str]:
    tools_per_env = _env_tool_counts(records)
    tasks_per_env = Counter(r.env_id for r in records)
    status = Counter(r.teacher_status for r in records)
    passes = [r.pass_at_k for r in records if r.pass_at_k is not None]
    rates = [r.solve_rate for r in records if r.solve_rate is not None]
    return [
        "| statistic | value |",
        "| --- | --- |",
        f"| tasks | {len(records)} |",
        f"| environments | {len(tools_per_env)} |",
        f"| tools per environment | {_summary(list(tools_per_env.values()))} |",
        f"| tasks per environment | {_summary(list(tasks_per_env.values()))} |",
        f"| stages per task | {_summary([len(r.trace.stages) for r in records])} |",
        f"| calls per task | {_summary([sum(len(s.calls) for s in r.trace.stages) for r in records])} |",
        f"| graph complexity | {_summary([r.graph_complexity for r in records])} |",
        f"| replay ok | {sum(r.replay_ok is True for r in records)} / {len(records)} |",
        f"| solvable | {sum(r.solvable is True for r in records)} / {len(records)} |",
        f"| teacher status | {', '.join(f'{k}: {v}' for k, v in sorted(status.items())) or '–'} |",
        f"| pass@k (unbiased) | {_summary(passes) if passes else 'not run'} |",
        f"| solve rate | {_summary(rates) if rates else 'not run'} |",
    ]


def _filter_lines(filters_run: Mapping[str, bool], records: Sequence[TaskRecord]) -> list[str]:
    lines: list[str] = []
    for name in sorted(filters_run):
        state = "**ran**" if filters_run[name] else "**NOT run**"
        lines.append(f"- `{name}` — {state}. {_FILTER_TEXT.get(name, '')}".rstrip())
    if records and all(r.teacher_status == "not_run" for r in records):
        lines.append(
            "- The teacher Pass@k filter did **not** run for any task (no endpoint was configured): "
            "`pass_at_k` is null and the tasks are verified by replay and solvability only."
        )
    return lines or ["- (no filter information recorded)"]


def render_card(
    records: Sequence[TaskRecord],
    *,
    seed: int,
    filters_run: Mapping[str, bool],
    license_id: str | None = None,
    pretty_name: str = "GUST",
    sources: Sequence[Source] = (),
    makers: Mapping[str, str] | None = None,
    splits: Mapping[str, Sequence[TaskRecord]] | None = None,
    split_seed: int | None = None,
) -> str:
    """The dataset card (`README.md`), Hugging Face conventions: YAML header (license derived from the sources),
    statistics, sources and licenses, construction, filters, columns, loading, running an environment,
    limitations, citation."""
    columns = [f"| `{name}` | `{_feature_text(feature)}` | {text} |" for name, feature, text in GUST_COLUMNS]
    license_id = license_id or card_license(sources)
    example_env = records[0].env_id if records else "<env_id>"
    splits = {k: v for k, v in (splits or {"train": records}).items() if k == "train" or v}
    parts = [
        _card_header(len(records), license_id, pretty_name, tuple(splits)),
        f"# {pretty_name}\n",
        "Synthetic long-horizon tool-use tasks over executable mock environments, built by GUST Forge following "
        "ToolVerse (tool dependency graphs, dynamic unlocking sampling, inverse context reconstruction, "
        "execution-based verification).\n",
        "## Statistics\n",
        "\n".join(_stats_lines(records)) + "\n",
        "![statistics](stats.png)\n",
        "## Splits\n",
        "\n".join(_split_lines(splits, split_seed)) + "\n",
        "## How it was built\n",
        "1. Tool definitions were refactored into executable environments (tools + mock DB) that pass their unit "
        "tests in a sandbox.\n2. Tool dependency graphs were inferred and sanitized; tool skeletons were sampled "
        "with dynamic unlocking sampling.\n3. Each skeleton was grounded on the live mock DB (inverse context "
        "reconstruction) into a golden trace.\n4. A task writer turned each trace into a user query, dialogue "
        "history and reasoning chain.\n5. Tasks were verified with the filters below.\n",
        f"Build seed: `{seed}`.\n",
        "## Who wrote the data\n",
        "\n".join(_provenance_lines(records)) + "\n",
        "## Filters\n",
        "\n".join(_filter_lines(filters_run, records)) + "\n",
        "## Columns\n",
        "| column | type | description |\n| --- | --- | --- |\n" + "\n".join(columns) + "\n",
        "Nested values are JSON text: decode `golden_trace`, `dialogue_history`, `tool_schemas` and `provenance` "
        "with `json.loads`.\n",
        *_standalone_sections(sources, makers or {}, example_env),
    ]
    return "\n".join(parts)


def _split_lines(splits: Mapping[str, Sequence[TaskRecord]], seed: int | None) -> list[str]:
    lines = [f"- `{name}`: {len(part)} tasks from {len({r.env_id for r in part})} environments "
             f"(`data/{name}-*.parquet`)" for name, part in splits.items()]  # fmt: skip
    if "test" in splits:
        lines.append(
            "\nThe `test` split holds out whole environments (no environment is in both splits; environment "
            f"shuffle seed `{seed}`): evaluate on it for generalization to unseen tools."
        )
    else:
        lines.append("\nNo held-out split was written (one environment, or `export.heldout_fraction` = 0).")
    return lines


def _provenance_lines(records: Sequence[TaskRecord]) -> list[str]:
    """Which backend (and model) produced each part, from the rows' `role:<part>` provenance."""
    lines = ["| part | produced by | tasks |", "| --- | --- | --- |"]
    templated = False
    for role in ROLE_NAMES:
        counts = Counter(r.provenance.get(f"role:{role}", "not recorded") for r in records)
        for producer, n in sorted(counts.items()):
            templated |= producer.startswith("offline")
            lines.append(f"| {role} | {producer} | {n} |")
    if templated:
        lines.append(
            "\n**Deterministic templates, not a language model, wrote the parts marked `offline`** (the "
            "offline twins of the LLM roles): expect template phrasing and template data, and treat them as "
            "a pipeline demonstration rather than as model-written data."
        )
    return lines


def _load_quality(report: Path | Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    if report is None or isinstance(report, Mapping):
        return report
    path = Path(report)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if not value.is_integer() else f"{value:g}"
    return str(value)


_QUALITY_ROWS = (
    ("tasks", "tasks"),
    ("median_tasks_per_env", "median tasks per environment"),
    ("single_stage_share", "single-stage tasks (no dependency used)"),
    ("placeholder_task_share", "tasks with a placeholder argument"),
    ("description_leak_call_share", "calls whose tool-description sentence is quoted"),
    ("tool_name_leak_call_share", "calls whose tool name is quoted"),
    ("undetermined_pick_task_share", "tasks with an undetermined pick"),
    ("noop_write_task_share", "tasks with a no-op write"),
    ("after_terminal_task_share", "tasks writing after a terminal state"),
    ("conflicting_stage_task_share", "tasks with a conflicting parallel stage"),
    ("empty_read_task_share", "tasks with an empty read"),
    ("echo_only_call_share", "echo-only calls"),
    ("template_value_task_share", "tasks with a templated DB filler value"),
    ("filler_value_task_share", "tasks with a mock filler argument (codename + field name, #N, boilerplate)"),
    ("filler_output_task_share", "tasks whose tool outputs show mock filler values"),
    ("goal_missing_task_share", "tasks whose query states no goal (values only)"),
    ("near_duplicate_task_share", "near-duplicate queries"),
    ("tool_coverage", "tool coverage (tools used / tools offered)"),
)


def render_quality_section(report: Mapping[str, Any] | None) -> str:
    """The card's quality table (dataset metrics, targets, drops), between markers so it can be replaced."""
    if not report:
        body = "Quality was **not measured** for this export (run `gust quality OUT`)."
        return f"{_QUALITY_START}\n## Quality\n\n{body}\n{_QUALITY_END}\n"
    dataset = report.get("dataset", {})
    targets = {row["metric"]: row for row in report.get("targets", [])}
    lines = ["| metric | value | target |", "| --- | --- | --- |"]
    for key, label in _QUALITY_ROWS:
        target = targets.get(key)
        mark = "" if target is None else f"{target['target']} {'✓' if target['met'] else '✗ missed'}"
        lines.append(f"| {label} | {_fmt(dataset.get(key, '–'))} | {mark} |")
    dropped = report.get("dropped") or {}
    drops = ", ".join(f"`{k}` {v}" for k, v in sorted(dropped.items())) or "none"
    body = "\n".join(lines) + (
        f"\n\nNear-duplicates measured with: {report.get('embedder', '?')}. Tasks dropped by the quality stage: "
        f"{drops}. Per-environment figures: `reports/quality.json` of the build."
    )
    return f"{_QUALITY_START}\n## Quality\n\n{body}\n{_QUALITY_END}\n"


def _with_quality(card: str, report: Mapping[str, Any] | None) -> str:
    """Replace the card's quality section, or insert it before the column table (else at the end)."""
    section = render_quality_section(report)
    start, end = card.find(_QUALITY_START), card.find(_QUALITY_END)
    if start != -1 and end != -1:
        return card[:start] + section + card[end + len(_QUALITY_END) :].lstrip("\n")
    anchor = card.find("## Columns")
    return card[:anchor] + section + "\n" + card[anchor:] if anchor != -1 else card + "\n" + section


def update_quality(folder: Path, records: Sequence[TaskRecord], report: Mapping[str, Any]) -> None:
    """Rewrite a GUST folder's card quality section and statistics figure from a quality report."""
    folder = Path(folder)
    card = folder / "README.md"
    if card.is_file():
        atomic_write_text(card, _with_quality(card.read_text(encoding="utf-8"), report))
    funnel = read_funnel(folder.parent / "reports")
    atomic_write_bytes(folder / "stats.png", render_stats_figure(records, report, funnel))


def _feature_text(feature: Value | List) -> str:
    if isinstance(feature, List):
        return f"list<{_feature_text(feature.feature)}>"
    return str(feature.dtype)


# --------------------------------------------------------------------------------------------------- figure


def _bars(ax: Any, values: Sequence[float], title: str, xlabel: str, *, width: float = 0.8) -> None:
    """Counts per distinct value (values are small integers or multiples of 1/k, so bins would blur them)."""
    counts = Counter(values)
    if counts:
        keys = sorted(counts)
        ax.bar(keys, [counts[k] for k in keys], width=width, color="#4C72B0", edgecolor="white")
        if width >= 0.5 and keys[-1] - keys[0] <= 20:
            ax.set_xticks(range(int(keys[0]), int(keys[-1]) + 1))
            ax.set_xlim(keys[0] - 1, keys[-1] + 1)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=width >= 0.5))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")


def _quality_panel(ax: Any, report: Mapping[str, Any] | None) -> None:
    """(e) Share of tasks/calls with each defect, against its target where one is set."""
    ax.set_title("(e) Quality (share; | = target)")
    if not report:
        ax.text(0.5, 0.5, "quality not measured", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    dataset = report.get("dataset", {})
    targets = {row["metric"]: row["target"] for row in report.get("targets", [])}
    keys = [(k, label) for k, label in _QUALITY_ROWS if k.endswith("_share")]
    values = [float(dataset.get(k, 0.0)) for k, _ in keys]
    ax.barh(range(len(keys)), values, color="#C44E52", edgecolor="white")
    for i, (key, _) in enumerate(keys):
        if key in targets:
            ax.plot([float(targets[key][2:])] * 2, [i - 0.4, i + 0.4], color="black", linewidth=1.5)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([label.split(" (")[0] for _, label in keys], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, max(0.2, *values) * 1.1 if values else 1)


FUNNEL_STAGES = ("ingest", "envgen", "tdg", "sample", "reconstruct", "tasks", "verify")


class FunnelStep(StrictModel):
    """One stage of the build as its report recorded it: items in, produced, dropped by reason."""

    stage: str
    inputs: int
    produced: int
    dropped: dict[str, int] = Field(default_factory=dict)


def read_funnel(reports_dir: Path) -> list[FunnelStep]:
    """The stage funnel of a run from `OUT/reports/<stage>.jsonl` (last line: the summary); missing stages skipped."""
    steps = []
    for stage in FUNNEL_STAGES:
        path = Path(reports_dir) / f"{stage}.jsonl"
        try:
            last = path.read_text(encoding="utf-8").strip().splitlines()[-1]
            steps.append(FunnelStep.model_validate(json.loads(last)["summary"]))
        except (OSError, IndexError, KeyError, ValueError):
            continue
    return steps


def _funnel_panel(ax: Any, funnel: Sequence[FunnelStep]) -> None:
    """Produced and dropped per stage (horizontal bars), each labelled with its top drop reasons."""
    if not funnel:
        ax.text(0.5, 0.5, "no stage reports", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    ys = list(range(len(funnel)))[::-1]
    produced = [step.produced for step in funnel]
    dropped = [sum(step.dropped.values()) for step in funnel]
    ax.barh(ys, produced, color="#4C72B0", label="produced")
    ax.barh(ys, dropped, left=produced, color="#DD8452", label="dropped")
    ax.set_yticks(ys, [f"{step.stage}\n{step.inputs}→{step.produced}" for step in funnel], fontsize=8)
    width = max((p + d for p, d in zip(produced, dropped, strict=True)), default=1) or 1
    for y, step, p, d in zip(ys, funnel, produced, dropped, strict=True):
        ranked = sorted(step.dropped.items(), key=lambda kv: (-kv[1], kv[0]))
        if ranked:
            text = ", ".join(f"{k}={v}" for k, v in ranked[:2]) + (
                f", +{len(ranked) - 2} more" if len(ranked) > 2 else ""
            )
            ax.text(p + d + width * 0.01, y, text, va="center", fontsize=7)
    ax.set_xlim(0, width * 1.6)
    ax.set_xlabel("items (toolsets → environments → graphs → skeletons → tasks)")
    ax.set_title("(a) Stage funnel: produced / dropped (top reasons)")
    ax.legend(loc="lower right", fontsize=7)


def render_stats_figure(
    records: Sequence[TaskRecord], quality: Mapping[str, Any] | None = None, funnel: Sequence[FunnelStep] = ()
) -> bytes:
    """A 2x3 PNG like ToolVerse Figure 4 under a title with N: (a) teacher Pass@k when the teacher ran, else the
    stage funnel with drop reasons; (b) graph complexity; (c) tools per environment; (d) stages per task;
    (e) the quality panel; (f) tasks per environment."""
    fig = Figure(figsize=(16, 8.5), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    envs = len({r.env_id for r in records})
    fig.suptitle(f"GUST: N = {len(records)} tasks over {envs} environments", fontsize=14, fontweight="bold")
    passes = [r.pass_at_k for r in records if r.pass_at_k is not None]
    if passes:
        _bars(axes[0][0], passes, f"(a) Teacher Pass@k (n = {len(passes)})", "pass@k", width=0.05)
    else:
        _funnel_panel(axes[0][0], funnel)
    _bars(axes[0][1], [r.graph_complexity for r in records], "(b) Graph complexity", "calls + edges")
    _bars(axes[1][0], list(_env_tool_counts(records).values()), "(c) Tools per environment", "tools")
    _bars(axes[1][1], [len(r.trace.stages) for r in records], "(d) Stages per task", "stages")
    _quality_panel(axes[0][2], quality)
    _bars(axes[1][2], list(Counter(r.env_id for r in records).values()), "(f) Tasks per environment", "tasks")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


# ------------------------------------------------------------------------------ sources, licenses, usage (card)

REPO_PLACEHOLDER = "ORG/NAME"  # replaced by the real repo id when the folder is published (`data.hub`)
_LICENSE_FILES = ("LICENSE", "LICENSE.md", "LICENSE.txt", "COPYING")
_LICENSE_PATTERNS = (  # (text that identifies the license, Hugging Face license id)
    ("apache license", "apache-2.0"),
    ("apache-2.0", "apache-2.0"),
    ("mit license", "mit"),
    ("spdx-license-identifier: mit", "mit"),
    ("bsd 3-clause", "bsd-3-clause"),
    ("bsd-3-clause", "bsd-3-clause"),
    ("creative commons attribution 4.0", "cc-by-4.0"),
    ("cc-by-4.0", "cc-by-4.0"),
    ("cc-by-sa-4.0", "cc-by-sa-4.0"),
    ("cc0", "cc0-1.0"),
)
_LICENSE_SEARCH_DEPTH = 4  # folders above an input file searched for a LICENSE


class Source(StrictModel):
    """One input file the dataset's environments were built from, with its license as found beside it."""

    name: str = Field(description="Input file name (no local path).")
    source_format: str
    license: str = Field(description="Hugging Face license id, or `unknown` when no license file was found.")
    environments: int
    tasks: int


def _openai_tool(schema: Mapping[str, Any]) -> dict[str, Any]:
    function = {"name": schema["name"], "description": schema.get("description", ""),
                "parameters": schema.get("parameters", {})}  # fmt: skip
    return {"type": "function", "function": function}


def _env_info(envs_dir: Path, env_ids: set[str]) -> dict[str, dict[str, Any]]:
    """Schemas (OpenAI form) and manifest of every environment the rows use that exists under `envs_dir`."""
    info: dict[str, dict[str, Any]] = {}
    for env_id in sorted(env_ids):
        folder = Path(envs_dir) / env_id
        try:
            schemas = json.loads((folder / "schemas.json").read_text(encoding="utf-8"))
            manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        tools = [_openai_tool(t) for t in schemas]
        info[env_id] = {"schemas": tools, "manifest": manifest}
    return info


def license_near(path: Path) -> str:
    """The license of an input file: a LICENSE file in its folder or up to a few folders above; else `unknown`."""
    folder = Path(path).parent
    for _ in range(_LICENSE_SEARCH_DEPTH):
        for name in _LICENSE_FILES:
            candidate = folder / name
            if candidate.is_file():
                head = candidate.read_text(encoding="utf-8", errors="replace")[:4000].lower()
                return next((lid for pattern, lid in _LICENSE_PATTERNS if pattern in head), "unknown")
        if folder.parent == folder:
            break
        folder = folder.parent
    return "unknown"


def sources_of(records: Sequence[TaskRecord], envs: Mapping[str, Mapping[str, Any]]) -> list[Source]:
    """The input files behind the rows (from the environment manifests' provenance), with counts and licenses."""
    tasks = Counter(r.env_id for r in records)
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for env_id, info in envs.items():
        provenance = info["manifest"].get("provenance") or {}
        path = Path(str(provenance.get("path") or "unknown"))
        key = (str(path), str(provenance.get("source_format") or "unknown"))
        recorded = provenance.get("license")  # found at ingest, while the input path still resolved
        entry = grouped.setdefault(key, {"environments": 0, "tasks": 0, "license": recorded or license_near(path)})
        entry["environments"] += 1
        entry["tasks"] += tasks.get(env_id, 0)
    return [Source(name=Path(path).name, source_format=fmt, **counts)
            for (path, fmt), counts in sorted(grouped.items())]  # fmt: skip


def card_license(sources: Sequence[Source]) -> str:
    """One license shared by every source, else `other` (the card then lists each source's license)."""
    licenses = {source.license for source in sources}
    return licenses.pop() if len(licenses) == 1 and "unknown" not in licenses else "other"


def _makers(records: Sequence[TaskRecord], envs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Who made what, as recorded: envgen backend/model per environment manifest, and any backends in row
    provenance (`provenance.backends`: role -> backend)."""
    makers: dict[str, Counter[str]] = {}
    for info in envs.values():
        manifest = info["manifest"]
        label = manifest.get("backend", "unknown") + (f" ({manifest['model']})" if manifest.get("model") else "")
        makers.setdefault("envgen (environments)", Counter())[label] += 1
    for record in records:
        backends = record.provenance.get("backends") if isinstance(record.provenance, Mapping) else None
        if isinstance(backends, Mapping):
            for role, backend in backends.items():
                makers.setdefault(str(role), Counter())[str(backend)] += 1
    return {role: ", ".join(f"{k} × {v}" for k, v in sorted(c.items())) for role, c in sorted(makers.items())}


def _standalone_sections(sources: Sequence[Source], makers: Mapping[str, str], env_id: str) -> list[str]:
    return [*_sources_section(sources, makers), *_usage_section(env_id), *_limitations_section(),
            *_citation_section()]  # fmt: skip


def _sources_section(sources: Sequence[Source], makers: Mapping[str, str]) -> list[str]:
    lines = ["## Sources and licenses\n"]
    if sources:
        lines.append("| input | format | license | environments | tasks |\n| --- | --- | --- | --- | --- |\n"
                     + "\n".join(f"| `{s.name}` | {s.source_format} | {s.license} | {s.environments} | {s.tasks} |"
                                  for s in sources) + "\n")  # fmt: skip
        if any(s.license == "unknown" for s in sources):
            lines.append("`unknown`: no license file was found beside that input; check its origin before reuse. "
                         "The card's `license: other` stands for this mix.\n")  # fmt: skip
    else:
        lines.append("No environment manifests were available when this card was written; sources are unknown.\n")
    if makers:
        lines.append("Made by (backend per role, as recorded in the manifests and row provenance):\n")
        lines.append("\n".join(f"- {role}: {text}" for role, text in makers.items()) + "\n")
    return lines


def _usage_section(env_id: str) -> list[str]:
    return [
        "## Loading\n",
        "```python\nimport json\nfrom datasets import load_dataset\n\n"
        f'ds = load_dataset("{REPO_PLACEHOLDER}", split="train")\n'
        f'# held_out = load_dataset("{REPO_PLACEHOLDER}", split="test")  # unseen environments (see Splits)\n'
        'row = ds[0]\ntools = json.loads(row["tool_schemas"])      # OpenAI function schemas\n'
        'trace = json.loads(row["golden_trace"])     # stages of calls with arguments and outputs\n```\n',
        "## Running an environment\n",
        "Every environment the rows use is in this repository under `envs/<env_id>/` (tool schemas, mock DB, tool "
        "code, unit tests, manifest). The tool code runs only inside GUST Forge's sandbox:\n",
        "```bash\npip install gustforge     # or a clone: see the GUST Forge README\n"
        f"gust env pull {REPO_PLACEHOLDER} {env_id} --to envs\n"
        f"gust env tools envs/{env_id}\n"
        f'gust env run envs/{env_id} TOOL --args \'{{"arg": "value"}}\'\n'
        f"gust env serve envs/{env_id}      # MCP over stdio\n```\n",
    ]


def _limitations_section() -> list[str]:
    return [
        "## Limitations\n",
        "- The environments are mock implementations: tools read and write a small synthetic database, not the "
        "real services the original tool definitions describe.\n"
        "- Task text and mock data are synthetic; the deterministic offline backend writes template text, which is "
        'less varied than text written by a model (see "Made by").\n'
        "- Verification checks that the golden trace replays and that stated arguments appear in the text; it "
        "does not prove the task is the only or the most natural solution.\n"
        "- Teacher Pass@k is only meaningful when the teacher filter ran (see Filters).\n"
        "- Tool code is generated: run it only in the GUST Forge sandbox.\n",
    ]


def _citation_section() -> list[str]:
    return [
        "## Citation\n",
        "```bibtex\n@software{gustforge,\n  title = {GUST Forge: executable tool environments and long-horizon "
        "tool-use tasks},\n  year = {2026},\n  note = {Dataset built with GUST Forge}\n}\n```\n",
        "The method follows ToolVerse (tool dependency graphs, dynamic unlocking sampling, inverse context "
        "reconstruction, execution-based verification); cite it together with the sources above.\n",
    ]
