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

from data.io import atomic_write_bytes, atomic_write_text
from data.models import GoldenTrace, TaskRecord, TaskText
from gustforge.errors import InputError
from gustforge.hashing import canonical_json

__all__ = [
    "GUST_COLUMNS",
    "gust_features",
    "record_to_row",
    "row_to_record",
    "write_gust",
    "read_gust",
    "shard_names",
    "render_card",
    "render_stats_figure",
    "render_quality_section",
    "update_quality",
    "ROLE_NAMES",
]

logger = logging.getLogger(__name__)

_DATA_DIR = "data"
_SHARD_GLOB = "train-*-of-*.parquet"

# (column, datasets feature, description) — the single source for the Features and the card's column table.
GUST_COLUMNS: tuple[tuple[str, Value | List, str], ...] = (
    ("task_id", Value("string"), "Content hash of the golden trace and task text."),
    ("env_id", Value("string"), "Executable environment the task runs in (`OUT/envs/<env_id>/`)."),
    ("tools", List(Value("string")), "Names of all tools the environment offers to the agent."),
    ("user_query", Value("string"), "The user-facing task."),
    ("dialogue_history", Value("string"), "JSON list of `{role, content}` turns preceding the task."),
    ("reasoning_chain", List(Value("string")), "Step-by-step plan linking the calls (annotation, not shown)."),
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


def record_to_row(record: TaskRecord) -> dict[str, Any]:
    """Flatten a `TaskRecord` into one GUST row (nested values as canonical JSON text)."""
    trace = record.trace
    used = _tools_used(trace)
    return {
        "task_id": record.task_id,
        "env_id": record.env_id,
        "tools": list(record.tools),
        "user_query": record.text.user_query,
        "dialogue_history": canonical_json([dict(turn) for turn in record.text.dialogue_history]),
        "reasoning_chain": list(record.text.reasoning_chain),
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


def shard_names(num_shards: int) -> list[str]:
    """Hub-style shard paths, e.g. `data/train-00000-of-00002.parquet`."""
    return [f"{_DATA_DIR}/train-{i:05d}-of-{num_shards:05d}.parquet" for i in range(num_shards)]


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
    license_id: str = "apache-2.0",
    pretty_name: str = "GUST (GUST Forge synthetic long-horizon tool-use tasks)",
    quality_report: Path | Mapping[str, Any] | None = None,
) -> Path:
    """Write the GUST dataset folder: `data/train-*.parquet`, `README.md` (card) and `stats.png`.

    Args:
        records: Verified task records (any order; duplicates by task_id are an error).
        out_dir: Dataset folder; stale shards from an earlier export are removed.
        seed: Build seed, recorded in the card.
        filters_run: Filter name -> whether it ran (e.g. `{"replay": True, "teacher_pass_at_k": False}`).
        max_rows_per_shard: Rows per parquet shard.
        license_id: SPDX-style license id for the card header.
        pretty_name: Dataset title for the card.
        quality_report: `reports/quality.json` (path or loaded) for the card's quality table and figure panel.

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
    for stale in (out_dir / _DATA_DIR).glob(_SHARD_GLOB):
        stale.unlink()
    rows = [record_to_row(r) for r in ordered]
    chunks = [rows[i : i + max_rows_per_shard] for i in range(0, len(rows), max_rows_per_shard)] or [[]]
    for name, chunk in zip(shard_names(len(chunks)), chunks, strict=True):
        atomic_write_bytes(out_dir / name, _parquet_bytes(chunk))
    quality = _load_quality(quality_report)
    card = render_card(ordered, seed=seed, filters_run=filters_run, license_id=license_id, pretty_name=pretty_name)
    atomic_write_text(out_dir / "README.md", _with_quality(card, quality))
    atomic_write_bytes(out_dir / "stats.png", render_stats_figure(ordered, quality))
    logger.info("wrote %d GUST rows in %d shard(s) to %s", len(rows), len(chunks), out_dir)
    return out_dir


def read_gust(folder: Path) -> list[TaskRecord]:
    """Read every shard of a GUST folder (or a folder of shards) back into `TaskRecord`s, in file order.

    Raises:
        InputError: No shard found.
    """
    folder = Path(folder)
    shards = sorted((folder / _DATA_DIR).glob(_SHARD_GLOB)) or sorted(folder.glob(_SHARD_GLOB))
    if not shards:
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


def _card_header(n: int, license_id: str, pretty_name: str) -> str:
    header = {
        "license": license_id,
        "pretty_name": pretty_name,
        "language": ["en"],
        "size_categories": [_size_category(n)],
        "task_categories": ["text-generation"],
        "tags": ["tool-use", "function-calling", "agents", "synthetic", "reinforcement-learning"],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": f"{_DATA_DIR}/train-*"}]}],
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
    license_id: str = "apache-2.0",
    pretty_name: str = "GUST",
) -> str:
    """The dataset card (`README.md`): YAML header, statistics, construction, filters, columns."""
    columns = [f"| `{name}` | `{_feature_text(feature)}` | {text} |" for name, feature, text in GUST_COLUMNS]
    parts = [
        _card_header(len(records), license_id, pretty_name),
        f"# {pretty_name}\n",
        "Synthetic long-horizon tool-use tasks over executable mock environments, built by GUST Forge following "
        "ToolVerse (tool dependency graphs, dynamic unlocking sampling, inverse context reconstruction, "
        "execution-based verification).\n",
        "## Statistics\n",
        "\n".join(_stats_lines(records)) + "\n",
        "![statistics](stats.png)\n",
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
        "Nested values are JSON text: decode `golden_trace`, `dialogue_history` and `provenance` with `json.loads`.\n",
    ]
    return "\n".join(parts)


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
    atomic_write_bytes(folder / "stats.png", render_stats_figure(records, report))


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


def render_stats_figure(records: Sequence[TaskRecord], quality: Mapping[str, Any] | None = None) -> bytes:
    """A 2x3 PNG like ToolVerse Figure 4 (Pass@k, graph complexity, tools per env, stages per task) plus the
    quality panel and tasks per environment."""
    fig = Figure(figsize=(15, 8), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(2, 3)
    passes = [r.pass_at_k for r in records if r.pass_at_k is not None]
    if passes:
        _bars(axes[0][0], passes, "(a) Teacher Pass@k", "pass@k", width=0.05)
    else:
        axes[0][0].text(0.5, 0.5, "teacher not run", ha="center", va="center", fontsize=14)
        axes[0][0].set_title("(a) Teacher Pass@k")
        axes[0][0].set_axis_off()
    _bars(axes[0][1], [r.graph_complexity for r in records], "(b) Graph complexity", "calls + edges")
    _bars(axes[1][0], list(_env_tool_counts(records).values()), "(c) Tools per environment", "tools")
    _bars(axes[1][1], [len(r.trace.stages) for r in records], "(d) Stages per task", "stages")
    _quality_panel(axes[0][2], quality)
    _bars(axes[1][2], list(Counter(r.env_id for r in records).values()), "(f) Tasks per environment", "tasks")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()
