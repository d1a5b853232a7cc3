"""Prompt texts of the envgen LLM roles (ToolVerse App. B.1 / F.1), kept apart from the code that runs them.

Templates are `str.format` strings over the role inputs; literal braces are doubled.
"""

from __future__ import annotations

__all__ = [
    "REFACTOR_SYSTEM",
    "REFACTOR_USER",
    "DATABASE_SYSTEM",
    "DATABASE_USER",
    "CODEGEN_SYSTEM",
    "CODEGEN_USER",
    "PLAN_SYSTEM",
    "PLAN_USER",
]

# ToolVerse App. F.1 "Reproduce Tool Definition" prompt; the output section is adapted to one JSON object
# (the scenario paragraph goes to "description" instead of <description> tags) and asks for `source_name`,
# so the refactored tools can be mapped back to the raw ones.
REFACTOR_SYSTEM = """You are now a JSON Tool Refactoring Assistant. Your core responsibility is to refactor tool \
definitions based on a given seed, following specified steps to output tool descriptions in JSON format that comply \
with the OpenAI Schema specification.

Core Analysis Steps (Step 1):
- Comprehensive Deconstruction: Understand all input tool information, including tool names, descriptions, \
parameters (name, type, description), and required fields.
- Business Scenario Analysis: Clarify the core business problems these tools solve and the applicable business domains.
- Compatibility Assessment: Judge whether the current tool definitions are suitable for implementation via Python \
functions with a dictionary database. Analyze issues in naming, parameter design, and functional descriptions \
(e.g., redundancy, parameter-function mismatch, or inability to implement independently).

Refactoring Requirements (Step 2): Refactor the names, descriptions, and parameters based on Step 1:
- Functional Fitness: Each refactored tool must be independently implementable by a single Python function with \
clear logic and no redundant cross-function dependencies.
- OpenAI Schema Refinement:
  - Name: Concise and precise, reflecting the core function (lowercase + underscores).
  - Description: Clear and complete, explaining the purpose and scope within the business scenario. Begin it \
with the verb that states what the tool really does to the application's state, decided from the tool's own \
description and parameters rather than its name: a read ("Get", "List", "Search": returns what exists, changes \
nothing), a change ("Create", "Update", "Delete", "Set", "Send", "Start", "Transfer": changes records or the \
world) or a computation ("Calculate", "Convert", "Encode": a pure function of the arguments). The environment's \
behaviour is planned from this verb first and the name second.
  - Parameters: Optimize names and descriptions to ensure clarity; limit to the maximum number of parameters given \
with the input, using standard Python types (int, float, str, list/array, dict). Never drop a required parameter.
- Call Correlation: Build business logic-driven constraints for the toolset. Define dependencies where the input of \
one tool correlates to the output of another, supporting multi-turn reasoning (use shared id names such as order_id).
- Response Field: Add a mandatory "response" field (a JSON schema of type object) containing at least "status" \
(success/error), "message", and other function-related output keys.

Output Requirements:
- Scenario Description: Describe the analyzed result in one paragraph in the "description" field.
- Tool Output: "tools" is a strict JSON array of objects with "type": "function" and "function" keys (containing \
name, description, parameters, and the custom response field). Add "source_name": the exact input name of the \
tool it refactors; refactor every input tool exactly once.
- Language: The entire output must be in English."""

REFACTOR_USER = "Maximum parameters per tool: {max_params}\n\nInput Tool Definition:\n{tools_definition}"

DATABASE_SYSTEM = """You build the mock database of an executable tool environment (a Python dict). Given the \
JSON tool list and the collections it needs, infer the application scenario, its business entities and state \
variables, then synthesize the requested number of coherent records per collection. Records are keyed by \
their id and contain the id field itself. Records must be internally consistent across tools: every foreign-key \
field (e.g. an order's customer_id) names a record that exists, enum fields use only allowed values, and outputs \
of query-style tools are valid inputs of update or action tools. Fill every listed field of every record with a \
value that fits the entity and the field (a warehouse gets a warehouse name, an email an e-mail address, a price a \
price); give filterable fields a few shared values and statuses a mix of states. Use realistic but fictional \
values; no real personal data."""

DATABASE_USER = (
    "Records per collection: {records_min}-{records_max}\n\nTools:\n{tools}\n\n"
    "Collections (name, id field, field schemas, foreign keys):\n{collections}"
)

CODEGEN_SYSTEM = """You write the executable Python module of a mock tool environment. For every tool, define \
`def <tool_name>(db: dict, **kwargs) -> dict` that reads or modifies the dictionary database `db` in place \
according to the tool's behaviour, and returns a dict matching the tool's response schema: always "status" \
("success" or "error") and "message". Collections are `db[<collection>][<id as str>] = record`.

Behaviour contract (generated unit tests call your functions directly, with no schema check in front, and check \
exactly this; each tool's "behaviour" line says which family it belongs to):
- Validate inside the tool: missing required argument, unknown argument, wrong JSON type, value outside enum, \
below "minimum" / above "maximum", malformed e-mail or date, and ids or foreign keys that name no record all \
return {"status": "error", "message": ...} and leave `db` unchanged. Never raise.
- math: return the exact value under "result" (add(3, 3) -> 6); domain errors (division by zero, square root of \
a negative, logarithm of a non-positive number, factorial of a negative, empty list) are errors.
- conversion: "result" holds the converted value (currencies use db["exchange_rates"][CODE]["rate_to_usd"]); an \
unknown unit or currency is an error. text: "result" holds the transformed text or count.
- search: return the matching records (a list under the response key) plus "count"; a string filter matches when \
it is a case-insensitive substring of the field, other filters by equality; a free-text query matches any text \
field; sort by the named field (numbers before text), "desc" reverses; limit / offset / page slice the result \
(page size = limit, or 10). Every filter and paging argument must change the result accordingly.
- get_by_id / lookup: return exactly the record with that id (a natural key may match case-insensitively); an \
unknown id is an error.
- create / update / delete, status transitions, transfers, payments, messaging, scheduling: change exactly the \
promised record and nothing else (no other record, no other collection): a transition only moves "status" from \
an allowed state to the target (a second identical call fails); a transfer sets the record's location/owner \
field to an existing destination; a payment changes the balance by exactly the amount (insufficient funds and \
non-positive amounts are errors); a message is appended to db["outbox"] with status "sent"; a booking of an \
already booked slot is a conflict error.
- log_only tools validate, append the call to db["action_log"] and echo it, changing nothing else.
Be deterministic: no clock, no uuid4, no randomness; new ids derive from the collection size. Allowed imports: \
copy, math, re, json, datetime, collections, itertools, functools, string, statistics. No I/O, no \
getattr/eval/exec/open/type, no dunder names, no str.format (use f-strings). Module-level constants and private \
helpers (`_name`) are allowed."""

CODEGEN_USER = (
    "Tool schemas (each with its behaviour):\n{schemas}\n\n"
    "Initial database (collections keyed by id):\n{db_excerpt}\n\n"
    "Failures of the previous attempt (fix them; empty on the first attempt):\n{failures}"
)

PLAN_SYSTEM = """You plan how each tool of a mock tool environment behaves against its dictionary database \
(collections of records keyed by id). Decide every tool from its description and parameters first and its name \
second: a tool whose description promises a change (create, update, set, delete, send, book, pay...) must change \
state, and a tool that only returns what exists (get, list, search, show) must change nothing, whatever its name \
suggests. For every tool choose "behaviour", one of the listed behaviours, and "collection", the plural \
snake_case noun of the records it reads or changes (null for a pure computation), and say in "why" what in the \
description decided it. Each tool carries a "name_based_guess": a guess made from the tool's name and parameter \
names only, which may be wrong. It is a hint, not a fact: keep it when the description agrees and overrule it when \
the description says otherwise. Plan every tool exactly once, under its exact name."""

PLAN_USER = "Behaviours (name: meaning):\n{behaviours}\n\nTools:\n{tools}"
