"""Domain models shared by every stage. Frozen pydantic models; JSON only at the edges (`data.io`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "StrictModel",
    "SourceFormat",
    "ToolKind",
    "Provenance",
    "RawTool",
    "Toolset",
    "ToolSchema",
    "PlanOverride",
    "RefactoredToolset",
    "QuarantineRecord",
    "TestCaseResult",
    "MutantResult",
    "MutationReport",
    "TestReport",
    "EnvManifest",
    "StageReport",
    "ToolCall",
    "TraceCall",
    "TraceStage",
    "GoldenTrace",
    "Skeleton",
    "TaskText",
    "TaskRecord",
]


class StrictModel(BaseModel):
    """Base for every domain model: unknown fields are errors, instances are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceFormat(StrEnum):
    TOUCAN_ROW = "toucan_row"  # HF Agent-Ark/Toucan-1.5M row (metadata.mcp_servers / available_tools)
    TOUCAN_SERVER = "toucan_server"  # TheAgentArk/Toucan mcp_servers/*.json or the compacted jsonl
    OPENAI_TOOLS = "openai_tools"  # [{"type": "function", "function": {...}}]
    MCP_TOOLS_LIST = "mcp_tools_list"  # MCP tools/list dump (LiveMCPBench layout)
    TOOLBENCH = "toolbench"  # ToolBench / StableToolBench api_list


class ToolKind(StrEnum):
    """What a tool does to the mock database; decides the code template and the unit tests."""

    READ = "read"
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    ACTION = "action"


class Provenance(StrictModel):
    """Where a toolset came from: enough to find the exact raw text again."""

    source_format: SourceFormat
    path: str = Field(description="Input file the toolset was read from.")
    record_id: str = Field(description="Row number, server id or name inside the file.")
    raw_sha256: str = Field(description="sha256 of the raw text of the record.")
    license: str | None = Field(
        default=None, description="License of the input file (a LICENSE file beside it or above), found at ingest."
    )


class RawTool(StrictModel):
    """A tool as found in the input, before refactoring. `parameters` is the raw JSON schema."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    output_schema: dict[str, Any] | None = None


class Toolset(StrictModel):
    """A normalized input toolset (one MCP server, one tool list). `toolset_id` is a content hash of the tools."""

    toolset_id: str
    name: str
    description: str = ""
    tools: tuple[RawTool, ...]
    provenance: Provenance
    notes: dict[str, str] = Field(
        default_factory=dict, description="tool -> ingest repair note (a duplicate listing dropped); not agent-facing."
    )


class ToolSchema(StrictModel):
    """A refactored, executable tool definition (OpenAI function style plus a response schema)."""

    name: str = Field(description="snake_case, unique within the toolset.")
    raw_name: str = Field(description="The tool's name in the raw input.")
    description: str
    parameters: dict[str, Any] = Field(description="JSON schema of type object.")
    response: dict[str, Any] = Field(description="JSON schema of the output; always has status and message.")
    kind: ToolKind
    entity: str | None = Field(default=None, description="DB collection the tool reads or writes, if any.")

    def openai_tool(self) -> dict[str, Any]:
        """The OpenAI function-calling form (what agents see)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class PlanOverride(StrictModel):
    """A behaviour the planning model chose for one tool over the name-based draft (`envgen.planning`)."""

    behaviour: str = Field(description="Chosen behaviour (a name of `envgen.entities.PLAN_CHOICES`).")
    entity: str | None = Field(default=None, description="Collection the tool acts on (plural snake_case).")
    reason: str = Field(description="Why the draft was overruled; becomes `ToolPlan.reason` (manifest notes).")


class RefactoredToolset(StrictModel):
    toolset_id: str
    name: str
    description: str = ""
    tools: tuple[ToolSchema, ...]
    name_map: dict[str, str] = Field(description="raw tool name -> refactored name")
    notes: dict[str, str] = Field(
        default_factory=dict, description="tool -> pipeline note (e.g. dropped parameters); never shown to agents."
    )
    log_only: tuple[str, ...] = Field(
        default=(), description="Tools the repair loop forced to the log-only fallback (their family failed)."
    )
    plan_overrides: dict[str, PlanOverride] = Field(
        default_factory=dict,
        description="tool -> behaviour the LLM planner chose over the name-based draft (empty offline); "
        "`envgen.entities.plan_environment` applies them wherever the environment is planned.",
    )


class QuarantineRecord(StrictModel):
    """One rejected item, with the stage and a specific reason. Every input ends produced or quarantined."""

    item_id: str
    stage: str
    reason: str = Field(description="Short machine-readable reason code, e.g. 'too_few_tools'.")
    detail: str = Field(default="", description="Human-readable specifics.")
    provenance: Provenance | None = None


class TestCaseResult(StrictModel):
    name: str
    tool: str
    passed: bool
    message: str = ""


class MutantResult(StrictModel):
    """One seeded bug (`operator` applied to `tool`) and whether the generated tests noticed it."""

    operator: str
    tool: str
    killed: bool
    by: str = Field(default="", description="First test that failed on the mutant.")


class MutationReport(StrictModel):
    """Mutation score of a generated test suite: killed / total seeded bugs (None when no mutant applies)."""

    score: float | None
    killed: int
    total: int
    mutants: tuple[MutantResult, ...] = ()


class TestReport(StrictModel):
    passed: bool
    cases: tuple[TestCaseResult, ...]
    duration_s: float
    error: str | None = Field(default=None, description="Sandbox-level failure (timeout, violation), if any.")
    mutation: MutationReport | None = Field(default=None, description="How many seeded bugs the suite kills.")
    rejected_calls: dict[str, int] = Field(
        default_factory=dict,
        description="Rejected calls of the suite: `schema_invalid` (the harness would reject them too) and "
        "`tool_only` (only the tool's own checks can: unknown ids, domain and state rules).",
    )

    @property
    def failures(self) -> list[TestCaseResult]:
        return [c for c in self.cases if not c.passed]


class EnvManifest(StrictModel):
    env_id: str
    toolset_id: str
    name: str
    provenance: Provenance
    backend: str
    model: str | None = None
    seed: int
    attempts: int
    tool_count: int
    name_map: dict[str, str]
    versions: dict[str, str]
    timings: dict[str, float]
    repaired_tools: dict[str, str] = Field(
        default_factory=dict,
        description="Tools whose implementation the repair loop replaced (tool -> kind before the repair); "
        "e.g. an update tool degraded to an 'action' that only logs the call.",
    )
    sandbox: dict[str, str] = Field(
        default_factory=dict,
        description="Isolation layers the sandbox worker that ran the tests reported (audit hook, privileges, "
        "hard rlimits, network/PID namespaces); see SandboxWorker.isolation.",
    )
    behaviours: dict[str, str] = Field(default_factory=dict, description="tool -> behaviour family it implements.")
    log_only_tools: list[str] = Field(
        default_factory=list, description="Tools that only validate, log and echo their call (no family fitted)."
    )
    mutation_score: float | None = Field(default=None, description="Share of seeded bugs the tests kill.")
    notes: dict[str, str] = Field(default_factory=dict, description="tool -> pipeline note (not agent-facing).")
    plan_overrides: dict[str, PlanOverride] = Field(
        default_factory=dict,
        description="tool -> behaviour the LLM planner chose over the name-based draft (`RefactoredToolset`); "
        "the plan the code was generated from is the name-based one with these applied.",
    )
    contradictions: dict[str, str] = Field(
        default_factory=dict,
        description="tool -> why its behaviour family breaks what its description/name promises (envgen.fidelity).",
    )
    family_swap: dict[str, Any] = Field(
        default_factory=dict,
        description="Family-swap mutants (a lookup in place of a write and vice versa): killed, total, score, "
        "survivors (envgen.mutation.operator_tally).",
    )


class StageReport(StrictModel):
    """Per-stage accounting: produced + sum(dropped.values()) == inputs."""

    stage: str
    inputs: int
    produced: int
    dropped: dict[str, int] = Field(default_factory=dict)

    @property
    def balanced(self) -> bool:
        return self.produced + sum(self.dropped.values()) == self.inputs


class ToolCall(StrictModel):
    name: str
    arguments: dict[str, Any]


class TraceCall(StrictModel):
    name: str
    arguments: dict[str, Any]
    output: dict[str, Any]
    dependency_args: dict[str, str] = Field(
        default_factory=dict, description="argument -> 'tool.output_path' it was copied from (implicit in the task)"
    )
    context_args: tuple[str, ...] = Field(default=(), description="arguments drawn from the DB (stated in the task)")
    pick_criteria: dict[str, str] = Field(
        default_factory=dict,
        description="dependency argument picked from a list of >= 2 -> the rule that singles it out, stated in the "
        "task: 'field=<key>' (the element's unique value of <key>) or 'position=first|last'",
    )
    db_changed: bool | None = Field(default=None, description="Whether the call changed the DB (None: not recorded).")
    purpose: str = Field(
        default="",
        description="Why the call is in the trace: 'requested' (the task asks for it in the user's words) or "
        "'provides:<tool>.<arg>' (its output supplies an argument of a later call that the text does not state); "
        "'' when not recorded (rows built before goal-first tasks).",
    )


class TraceStage(StrictModel):
    calls: tuple[TraceCall, ...]
    db_hash_before: str
    db_hash_after: str


class Skeleton(StrictModel):
    """A sampled tool skeleton: stages of tools that may run in parallel, in dependency order."""

    env_id: str
    graph_index: int
    stages: tuple[tuple[str, ...], ...]
    seed: int


class GoldenTrace(StrictModel):
    trace_id: str
    env_id: str
    graph_index: int
    stages: tuple[TraceStage, ...]
    edges_used: tuple[tuple[str, str], ...] = ()
    initial_db_hash: str
    final_db_hash: str
    graph_source: str = Field(default="", description="Inferer that produced the graph (e.g. 'deterministic').")


class TaskText(StrictModel):
    user_query: str
    dialogue_history: tuple[dict[str, str], ...] = ()
    reasoning_chain: tuple[str, ...] = ()
    expected_answer: tuple[str, ...] = Field(
        default=(),
        description="Facts the agent's final reply must contain (values read from the gold outputs, as strings).",
    )


class TaskRecord(StrictModel):
    """A synthesized task with its golden trace and verification results (one GUST row)."""

    task_id: str
    env_id: str
    text: TaskText
    trace: GoldenTrace
    tools: tuple[str, ...]
    graph_complexity: int
    replay_ok: bool | None = None
    solvable: bool | None = None
    teacher_status: str = Field(default="not_run", description="not_run | passed | failed | teacher_error")
    pass_at_k: float | None = Field(default=None, description="Unbiased pass@k over the teacher's n attempts.")
    solve_rate: float | None = Field(default=None, description="Solved teacher attempts / attempts (c / n).")
    seed: int
    provenance: dict[str, str] = Field(
        default_factory=dict,
        description="Content hashes of the inputs (toolset, schemas, tools source, db) and, under 'role:<name>', "
        "which backend and model produced each part (schemas, db, code, graphs, tasks, verification).",
    )
