"""envgen.fidelity and the planner that keeps it: a tool is built as what its description promises.

Every case here was wrong before issue 21: `drop_database` was a record lookup, `set_download_directory`'s test
asserted the DB unchanged, a `get_*` tool naming a post was built as a message that changes state."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from data.models import RawTool, Toolset
from envgen.build import build_environment
from envgen.config import EnvGenConfig
from envgen.database import synthesize_database
from envgen.entities import plan_environment
from envgen.fidelity import READ_ONLY_FAMILIES, STATE_FAMILIES, Promise, check_call, contradiction, promise
from envgen.mutation import operator_tally, score_suite
from envgen.refactor import refactor_toolset
from envgen.testgen import generate_tests_source
from gustforge.sandbox import SandboxLimits, SandboxPool, SandboxWorker
from tests.envgen._envgen_samples import sample

FAST = EnvGenConfig(sandbox_cpu_seconds=2, sandbox_memory_mb=256, sandbox_wall_seconds=5)
LIMITS = SandboxLimits(cpu_seconds=2, memory_mb=256, wall_seconds=5)
TEXT, INT = {"type": "string"}, {"type": "integer"}


def _tool(name: str, description: str, props: dict, required: tuple[str, ...] = ()) -> RawTool:
    return RawTool(name=name, description=description,
                   parameters={"type": "object", "properties": props, "required": list(required)})  # fmt: skip


def _toolset(*tools: RawTool) -> Toolset:
    return Toolset(toolset_id="fidelity", name="Admin console", provenance=sample("Stockroom").provenance,
                   tools=tools)  # fmt: skip


# A toolset whose names and descriptions fooled the name-based planner (each case from the Toucan corpus).
ADMIN = _toolset(
    _tool("list_databases", "List all databases on the server.", {"limit": INT}),
    _tool("drop_database", "Drops the database and permanently deletes all of its collections.",
          {"database": TEXT}, ("database",)),
    _tool("set_download_directory", "Sets the directory where downloaded files are saved.",
          {"directory": TEXT}, ("directory",)),
    _tool("start_scan", "Start a new vulnerability scan on a target URL.",
          {"target": TEXT, "scan_type": {"type": "string", "enum": ["quick", "full"]}}, ("target",)),
    _tool("get_scan", "Get a scan and its findings.", {"scan_id": TEXT}, ("scan_id",)),
    _tool("get_post_by_id", "Retrieve a specific post by its ID.", {"post_id": TEXT}, ("post_id",)),
)  # fmt: skip


@pytest.fixture(scope="module")
def worker() -> Iterator[SandboxWorker]:
    with SandboxWorker(LIMITS) as w:
        yield w


class TestPromise:
    @pytest.mark.parametrize(
        ("name", "description", "effect", "source"),
        [
            ("drop_database", "Drops the database and all its data.", "write", "description"),
            ("get_profile", "Sets the active profile.", "write", "description"),  # the description wins
            ("info", "Returns the chapter's metadata.", "read", "description"),
            ("list_items", "Items stored in a warehouse.", "read", "name"),  # a participle promises nothing
            ("search", "Search for stories on Hacker News.", "read", "description"),
            ("sha256", "Hash a string with SHA-256.", "compute", "description"),
            ("gdb_set_breakpoint", "设置断点", "write", "name"),  # no English verb: the name's
            ("api_coins_id", "Coin data.", "unknown", "none"),
            ("run_pslist", "Run the PsList plugin to list processes.", "read", "description"),  # run *to* list
            ("run_mutmut", "Run a mutation testing session on the target.", "write", "description"),
            ("get_text_before_fold", "Truncate text to fit the fold.", "compute", "description"),
        ],
    )
    def test_description_first_then_name(self, name: str, description: str, effect: str, source: str) -> None:
        said = promise(_tool(name, description, {}))  # type: ignore[arg-type]
        assert (said.effect, said.source) == (effect, source)

    def test_contradictions_name_the_broken_promise(self) -> None:
        write, read = Promise(effect="write", verb="drop", source="description"), Promise(effect="read", verb="get")
        assert "never happens" in (contradiction(write, "lookup") or "")
        assert contradiction(write, "crud") is None and contradiction(write, "log_only") is None
        assert "changes state" in (contradiction(read, "messaging") or "")
        assert "only logs" in (contradiction(read, "log_only") or "")
        assert all(contradiction(read, f) is None for f in READ_ONLY_FAMILIES)
        assert all(contradiction(Promise(effect="unknown"), f) is None for f in READ_ONLY_FAMILIES | STATE_FAMILIES)

    def test_check_call_compares_the_db_diff_with_the_promise(self) -> None:
        read, write = Promise(effect="read", verb="get"), Promise(effect="write", verb="delete")
        ok = {"status": "success", "message": "done"}
        assert not check_call(read, {"a": {}}, {"a": {"1": {}}}, ok).ok
        assert "unchanged" in check_call(write, {"a": {}}, {"a": {}}, ok).reason
        assert check_call(write, {"a": {"1": {}}}, {"a": {}}, ok).ok
        assert check_call(read, {}, {"x": 1}, {"status": "error", "message": "no"}).ok  # rejections: not judged


class TestPlanner:
    def test_actions_never_become_lookups_and_reads_never_write(self) -> None:
        rt = refactor_toolset(ADMIN, FAST)
        plans = {p.name: p for p in plan_environment(rt.tools).tools}
        assert (plans["drop_database"].template, plans["drop_database"].id_param) == ("delete", "database")
        assert plans["set_download_directory"].family == "log_only"  # nothing fits: log-only, with the reason
        assert "no writing family fits" in (plans["set_download_directory"].reason or "")
        assert (plans["start_scan"].template, plans["start_scan"].entity) == ("create", "scans")
        assert plans["get_post_by_id"].family == "get_by_id" and plans["get_scan"].family == "get_by_id"
        for tool in rt.tools:
            assert contradiction(promise(tool), plans[tool.name].family) is None, tool.name
        assert all(p.family not in ("lookup", "get_by_id", "search") for n, p in plans.items()
                   if n in ("drop_database", "set_download_directory", "start_scan"))  # fmt: skip

    def test_the_generated_tests_assert_the_promised_effect(self) -> None:
        rt = refactor_toolset(ADMIN, FAST)
        tests = generate_tests_source(rt, synthesize_database(rt, seed=0), seed=0)
        directory = tests.split("def test_set_download_directory_logs", 1)[1].split("\ndef ", 1)[0]
        assert "the call was not logged" in directory and "a read changed the DB" not in directory
        drop = tests.split("def test_drop_database_", 1)[1].split("\ndef ", 1)[0]
        assert "a read changed the DB" not in drop
        post = tests.split("def test_get_post_by_id_", 1)[1].split("\ndef ", 1)[0]
        assert "a read changed the DB" in post

    def test_the_built_env_keeps_its_promises_and_kills_every_family_swap(self) -> None:
        with SandboxPool(size=1, limits=LIMITS) as pool:
            result = build_environment(ADMIN, FAST, sandbox_pool=pool)
        assert result.artifacts is not None, result.quarantine
        manifest = result.artifacts.manifest
        assert manifest.contradictions == {}
        assert manifest.behaviours["drop_database"] == "crud" and manifest.behaviours["get_post_by_id"] == "get_by_id"
        assert manifest.notes["set_download_directory"].startswith("behaviour: description verb 'set'")
        assert manifest.family_swap["total"] == len(ADMIN.tools) and manifest.family_swap["score"] == 1.0


def test_family_swap_mutants_are_killed_by_the_suite_and_survive_a_hollow_one(worker: SandboxWorker) -> None:
    from envgen.codegen import generate_tools_source

    rt = refactor_toolset(sample("Stockroom"), FAST)
    db = synthesize_database(rt, seed=0)
    source = generate_tools_source(rt, db)
    tally = operator_tally(score_suite(rt, db, source, worker, seed=0), "family_swap")
    assert tally["total"] == len(rt.tools) and tally["score"] == 1.0 and tally["survivors"] == []
    hollow = "".join(f"def test_{t.name}_runs(env):\n    env.call_tool({t.name!r}, {{}})\n" for t in rt.tools)
    weak = operator_tally(score_suite(rt, db, source, worker, seed=0, tests_source=hollow), "family_swap")
    assert weak["score"] == 0.0 and len(weak["survivors"]) == len(rt.tools)


def test_run_fidelity_aggregates_the_manifests(tmp_path) -> None:  # noqa: ANN001
    import json

    from envgen.fidelity import run_fidelity

    manifests = {
        "a": {"behaviours": {"x": "crud", "y": "lookup"}, "contradictions": {"y": "..."}, "log_only_tools": [],
              "family_swap": {"killed": 2, "total": 2}},
        "b": {"behaviours": {"z": "search", "w": "log_only"}, "contradictions": {}, "log_only_tools": ["w"],
              "family_swap": {"killed": 1, "total": 2}},
    }  # fmt: skip
    for name, manifest in manifests.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "manifest.json").write_text(json.dumps(manifest))
    got = run_fidelity(tmp_path)
    assert got["env_tools"] == 4 and got["env_contradictions"] == 1 and got["env_contradiction_share"] == 0.25
    assert got["env_family_swap_score"] == 0.75 and got["env_envs_killing_every_family_swap"] == 1
    assert got["env_log_only_tools"] == 1


def test_lookups_take_a_name_where_the_description_says_so_and_answer_a_structured_not_found(
    worker: SandboxWorker,
) -> None:
    from envgen.codegen import generate_tools_source

    projects = _toolset(
        _tool("list_projects", "List projects.", {"limit": INT}),
        _tool("get_project", "Get a project.", {"project_id": {"type": "string", "description": "Project ID or name"}},
              ("project_id",)),
        _tool("get_task", "Get a task.", {"task_id": TEXT}, ("task_id",)),
        _tool("create_task", "Create a task in a project.", {"title": TEXT, "project_id": TEXT}, ("title",)),
        _tool("delete_task", "Delete a task.", {"task_id": TEXT}, ("task_id",)),
    )  # fmt: skip
    rt = refactor_toolset(projects, FAST)
    db = synthesize_database(rt, seed=0)
    worker.load(generate_tools_source(rt, db), db)
    project_id, project = next(iter(db["projects"].items()))
    by_name = worker.call("get_project", {"project_id": f"  {project['name'].upper()} "})
    assert by_name["status"] == "success" and by_name["project"]["project_id"] == project_id
    assert worker.call("get_project", {"project_id": project_id.lower()})["status"] == "success"  # any case
    missing = worker.call("get_project", {"project_id": "no such project"})
    assert missing["status"] == "error" and missing["error"] == {
        "code": "not_found", "collection": "projects", "key": "no such project"
    }  # fmt: skip
    task_name = next(iter(db["tasks"].values())).get("title")
    assert worker.call("get_task", {"task_id": task_name})["status"] == "error"  # the id only: nothing says name


def test_an_update_writes_a_value_that_differs_from_the_stored_one() -> None:
    """`update_tsconfig(path, options={})` on a record holding `options == {}` proved nothing: the family-swap and
    state-skipped mutants survived it."""
    from envgen.testgen import _Ctx, _field_args

    rt = refactor_toolset(_toolset(
        _tool("list_tsconfigs", "List tsconfig files.", {"limit": INT}),
        _tool("update_tsconfig", "Update TypeScript configuration.",
              {"path": TEXT, "options": {"type": "object", "description": "compiler options"}}, ("path", "options")),
        _tool("delete_tsconfig", "Delete a tsconfig.", {"path": TEXT}, ("path",)),
    ), FAST)  # fmt: skip
    plan = plan_environment(rt.tools)
    tool, tool_plan = rt.tools[1], plan.tools[1]
    assert tool_plan.template == "update" and tool_plan.natural_key
    entity = plan.entity(tool_plan.entity)
    for stored in ({}, {"strict": True}, None):
        record = {"options": stored}
        args = _field_args(_Ctx(tool, tool_plan, entity, {}, 0), record)
        assert args["options"] != stored and isinstance(args["options"], dict)


def test_under_the_llm_backend_the_model_decides_the_promise_the_planner_reads_first() -> None:
    """The refactor role writes each description; it is asked to open with the verb of what the tool really does,
    and that verb (not the name) is what the planner holds the behaviour to; an overruled name draft is noted."""
    from envgen.prompts import REFACTOR_SYSTEM

    assert "rather than its name" in REFACTOR_SYSTEM and "planned from this verb first" in REFACTOR_SYSTEM
    # a model that reads `get_profile` as the setter it is: the plan follows the description, with the reason
    rt = refactor_toolset(_toolset(
        _tool("list_profiles", "List profiles.", {"limit": INT}),
        _tool("get_profile", "Set the active profile to the one named.", {"profile_name": TEXT}, ("profile_name",)),
        _tool("get_user", "Get a user.", {"user_id": TEXT}, ("user_id",)),
    ), FAST)  # fmt: skip
    plan = plan_environment(rt.tools).tool("get_profile")
    assert plan.family == "log_only" and "description verb 'set' promises a write" in (plan.reason or "")
    assert "the name-based draft was 'lookup'" in (plan.reason or "")


def test_the_sandbox_fidelity_check_catches_a_read_that_writes_and_a_write_that_does_nothing(
    worker: SandboxWorker,
) -> None:
    from envgen.build import _call_fidelity
    from envgen.codegen import generate_tools_source

    rt = refactor_toolset(sample("Stockroom"), FAST)
    db = synthesize_database(rt, seed=0)
    source = generate_tools_source(rt, db)
    worker.load(source, db)
    assert _call_fidelity(rt, db, worker, seed=0) == {}  # the built code keeps every promise
    broken = source + (
        "\n\n_get_item = get_item\n_remove_item = remove_item\n\n\n"
        "def get_item(db, **kwargs):\n    out = _get_item(db, **kwargs)\n    db['items'].clear()\n    return out\n\n\n"
        "def remove_item(db, **kwargs):\n    return {'status': 'success', 'message': 'removed'}\n"
    )
    num = {"type": "number"}
    calc = refactor_toolset(_toolset(  # "Add two numbers" computes: the math matcher decides, not the verb
        _tool("add", "Add two numbers.", {"a": num, "b": num}, ("a", "b")),
        _tool("multiply", "Multiply two numbers.", {"a": num, "b": num}, ("a", "b")),
        _tool("list_results", "List saved results.", {"limit": INT}),
    ), FAST)  # fmt: skip
    assert [p.family for p in plan_environment(calc.tools).tools][:2] == ["math", "math"]
    calc_db = synthesize_database(calc, seed=0)
    worker.load(generate_tools_source(calc, calc_db), calc_db)
    assert _call_fidelity(calc, calc_db, worker, seed=0) == {}
    worker.load(broken, db)
    found = _call_fidelity(rt, db, worker, seed=0)
    assert set(found) == {"get_item", "remove_item"}
    assert "promises a read but the call changed items" in found["get_item"]
    assert "left the DB unchanged" in found["remove_item"]
