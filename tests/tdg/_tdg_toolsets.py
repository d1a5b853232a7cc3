"""Hand-written toolsets with known dependencies, for the TDG tests (inference, DUS, reconstruction)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.models import ToolKind, ToolSchema

TINY_ENV = Path(__file__).resolve().parents[1] / "envgen" / "fixtures" / "tiny_env"
SHOP_ENV = Path(__file__).resolve().parent / "fixtures" / "shop_env"


def _obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    return out


def _response(**props: Any) -> dict[str, Any]:
    return _obj(
        {"status": {"type": "string", "enum": ["success", "error"]}, "message": {"type": "string"}, **props},
        ["status", "message"],
    )


def tool(name: str, kind: ToolKind, entity: str | None, params: dict[str, Any], required: list[str],
         **response: Any) -> ToolSchema:  # fmt: skip
    return ToolSchema(name=name, raw_name=name, description=f"{name} tool", parameters=_obj(params, required),
                      response=_response(**response), kind=kind, entity=entity)  # fmt: skip


S = {"type": "string"}
BOOK = _obj({"book_id": S, "title": S, "author": S, "available": {"type": "boolean"}})
LOAN = _obj({"loan_id": S, "book_id": S, "member_id": S, "due_date": S})


def library_tools() -> list[ToolSchema]:
    """A library: books, members, loans, plus an unrelated weather tool."""
    return [
        tool("search_books", ToolKind.READ, "books", {"query": S}, ["query"], books={"type": "array", "items": BOOK}),
        tool("get_book", ToolKind.READ, "books", {"book_id": S}, ["book_id"], book=BOOK),
        tool("list_members", ToolKind.READ, "members", {}, [],
             members={"type": "array", "items": _obj({"member_id": S, "name": S})}),
        tool("checkout_book", ToolKind.CREATE, "loans", {"book_id": S, "member_id": S}, ["book_id", "member_id"],
             loan=LOAN, loan_id=S),
        tool("renew_loan", ToolKind.UPDATE, "loans", {"loan_id": S, "days": {"type": "integer"}}, ["loan_id"],
             loan=LOAN),
        tool("return_book", ToolKind.DELETE, "loans", {"loan_id": S}, ["loan_id"], loan_id=S,
             fine={"type": "number"}),
        tool("get_weather", ToolKind.READ, None, {"city": S}, ["city"], temperature={"type": "number"},
             conditions=S),
    ]  # fmt: skip


# Data flows a careful human draws (recall is measured against these) ...
LIBRARY_REQUIRED = {
    ("search_books", "get_book"), ("search_books", "checkout_book"), ("get_book", "checkout_book"),
    ("list_members", "checkout_book"), ("checkout_book", "renew_loan"), ("checkout_book", "return_book"),
}  # fmt: skip
# ... and edges that are also defensible (precision is measured against required | plausible). renew_loan ->
# return_book only hands on the loan_id renew_loan was given (an identity chain: no value originates there).
LIBRARY_PLAUSIBLE = {("checkout_book", "get_book"), ("renew_loan", "get_book"), ("renew_loan", "return_book")}

TINY_REQUIRED = {
    ("list_orders", "get_order"), ("list_orders", "update_order_status"), ("list_orders", "cancel_order"),
    ("get_order", "update_order_status"), ("get_order", "cancel_order"),
}  # fmt: skip
TINY_PLAUSIBLE = {("update_order_status", "cancel_order"), ("get_order", "list_orders")}


def load_schemas(env_dir: Path) -> list[ToolSchema]:
    return [ToolSchema.model_validate(row) for row in json.loads((env_dir / "schemas.json").read_text())]


def load_db(env_dir: Path) -> dict[str, Any]:
    return json.loads((env_dir / "db.json").read_text())
