"""A small in-memory bank environment and a hand-built golden trace for the taskgen/verify tests."""

from __future__ import annotations

from data.models import GoldenTrace, ToolKind, ToolSchema, TraceCall, TraceStage
from envgen.runtime import Environment
from gustforge.hashing import content_hash

TOOLS_SOURCE = """
def get_user(db, user_id):
    user = db["users"].get(user_id)
    if user is None:
        return {"status": "error", "message": "no user " + user_id}
    return {"status": "success", "message": "found", "user": dict(user)}


def find_user(db, name):
    for uid, user in sorted(db["users"].items()):
        if user["name"] == name:
            return {"status": "success", "message": "found", "user_id": uid}
    return {"status": "error", "message": "no user named " + name}


def add_balance(db, account_id, amount):
    account = db["accounts"].get(account_id)
    if account is None:
        return {"status": "error", "message": "no account " + account_id}
    account["balance"] += amount
    return {"status": "success", "message": "credited", "balance": account["balance"]}


def get_balance(db, account_id):
    account = db["accounts"].get(account_id)
    if account is None:
        return {"status": "error", "message": "no account " + account_id}
    return {"status": "success", "message": "ok", "balance": account["balance"]}
"""

_OK = {"status": {"type": "string", "enum": ["success", "error"]}, "message": {"type": "string"}}


def _schema(name: str, description: str, params: dict, kind: ToolKind, extra: dict) -> ToolSchema:
    return ToolSchema(
        name=name,
        raw_name=name,
        description=description,
        parameters={"type": "object", "properties": params, "required": sorted(params), "additionalProperties": False},
        response={"type": "object", "properties": {**_OK, **extra}, "required": ["status", "message"]},
        kind=kind,
    )


SCHEMAS = (
    _schema(
        "get_user",
        "Retrieve a user's profile by user ID.",
        {"user_id": {"type": "string"}},
        ToolKind.READ,
        {"user": {"type": "object"}},
    ),
    _schema(
        "find_user",
        "Find a user's ID from their full name.",
        {"name": {"type": "string"}},
        ToolKind.READ,
        {"user_id": {"type": "string"}},
    ),
    _schema(
        "add_balance",
        "Credit an amount to an account.",
        {"account_id": {"type": "string"}, "amount": {"type": "integer", "minimum": 1}},
        ToolKind.UPDATE,
        {"balance": {"type": "integer"}},
    ),
    _schema(
        "get_balance",
        "Read the balance of an account.",
        {"account_id": {"type": "string"}},
        ToolKind.READ,
        {"balance": {"type": "integer"}},
    ),
)

DB = {
    "users": {
        "u1": {"name": "Ann Lee", "account_id": "acc-7"},
        "u2": {"name": "Bo Chen", "account_id": "acc-9"},
    },
    "accounts": {"acc-7": {"balance": 10}, "acc-9": {"balance": 3}},
}


def bank_env(env_id: str = "bank") -> Environment:
    return Environment.from_parts(env_id, SCHEMAS, DB, TOOLS_SOURCE)


def build_trace(env: Environment, plan, *, trace_id: str = "t1") -> GoldenTrace:
    """Execute `plan` (stages of (tool, args, dependency_args, context_args)) on a live session."""
    stages = []
    with env.session() as session:
        initial = session.db_hash()
        for stage in plan:
            before = session.db_hash()
            calls = [
                TraceCall(name=n, arguments=a, output=session.call(n, a), dependency_args=d, context_args=c)
                for n, a, d, c in stage
            ]
            stages.append(TraceStage(calls=tuple(calls), db_hash_before=before, db_hash_after=session.db_hash()))
        final = session.db_hash()
    edges = sorted({(src.split(".")[0], n) for stage in plan for n, _, d, _ in stage for src in d.values()})
    return GoldenTrace(
        trace_id=trace_id,
        env_id=env.env_id,
        graph_index=0,
        stages=tuple(stages),
        edges_used=tuple(edges),
        initial_db_hash=initial,
        final_db_hash=final,
    )


# find Ann (context: name) -> get_user (dependency: user_id) -> add_balance (dependency: account_id, context: amount)
CREDIT_PLAN = [
    [("find_user", {"name": "Ann Lee"}, {}, ("name",))],
    [("get_user", {"user_id": "u1"}, {"user_id": "find_user.user_id"}, ())],
    [("add_balance", {"account_id": "acc-7", "amount": 5}, {"account_id": "get_user.user.account_id"}, ("amount",))],
]

# one stage of two parallel reads, then a credit with a stated account
PARALLEL_PLAN = [
    [("get_user", {"user_id": "u2"}, {}, ("user_id",)), ("get_balance", {"account_id": "acc-9"}, {}, ("account_id",))],
    [("add_balance", {"account_id": "acc-9", "amount": 2}, {}, ("account_id", "amount"))],
]


def content_db_hash() -> str:
    return content_hash(DB)
