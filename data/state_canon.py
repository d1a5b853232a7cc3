"""Final-state comparison modulo creation order.

Two correct agents that issue one turn's independent creates in different orders end with DBs that differ only in
which generated id each new record got (and in the order of lists that collect new ids). `canonical_state` maps a
final DB to a form that forgets that: every id a run generated (a key of a table that the initial DB did not hold,
and the same value in an id field of its record) is replaced by a label computed from the content of its record
with the generated ids masked; tables keep their initial records by key and list their new records sorted; lists
that hold a generated id are sorted. Isomorphic final states (equal up to a renaming of generated ids) get the same
`canonical_hash`; a state that differs in any other value does not.

`same_final_state` is the verdict every checker uses: equal plain hashes, or equal canonical hashes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from gustforge.hashing import content_hash

__all__ = ["generated_ids", "canonical_state", "canonical_hash", "same_final_state"]

_NEW = "<new>"


def _id_key(key: str) -> bool:
    key = key.lower()
    return key == "id" or key.endswith("_id") or key.endswith("_ids")


def generated_ids(db: Mapping[str, Any], initial: Mapping[str, Any]) -> set[str]:
    """Ids of the records the run created: table keys absent from the initial DB (as strings)."""
    out: set[str] = set()
    for table, rows in db.items():
        if not isinstance(rows, Mapping):
            continue
        before = initial.get(table)
        before = before if isinstance(before, Mapping) else {}
        out.update(str(key) for key in rows if key not in before)
    return out


def _subst(value: Any, ids: set[str], label: Mapping[str, str], key: str = "") -> Any:
    """Replace generated ids by their label (strings anywhere; numbers only under id-like keys)."""
    if isinstance(value, Mapping):
        return {k: _subst(v, ids, label, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        items = [_subst(v, ids, label, key) for v in value]
        if any(_holds(v, ids) for v in value):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True, default=str))
        return items
    if isinstance(value, str) and value in ids:
        return label.get(value, _NEW)
    if isinstance(value, int | float) and not isinstance(value, bool) and _id_key(key) and _num(value) in ids:
        return label.get(_num(value), _NEW)
    return value


def _num(value: int | float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _holds(value: Any, ids: set[str]) -> bool:
    if isinstance(value, str):
        return value in ids
    if isinstance(value, Mapping):
        return any(_holds(v, ids) or str(k) in ids for k, v in value.items())
    if isinstance(value, list):
        return any(_holds(v, ids) for v in value)
    return False


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def canonical_state(db: Mapping[str, Any], initial: Mapping[str, Any]) -> dict[str, Any]:
    """The final DB with generated ids replaced by content labels and new records listed in sorted order."""
    ids = generated_ids(db, initial)
    if not ids:
        return dict(db)
    records = {
        str(key): (table, row)
        for table, rows in db.items()
        if isinstance(rows, Mapping)
        for key, row in rows.items()
        if str(key) in ids
    }
    label = {i: f"<new:{table}:{_digest(_subst(row, ids, {}))}>" for i, (table, row) in records.items()}
    out: dict[str, Any] = {}
    for table, rows in db.items():
        if not isinstance(rows, Mapping):
            out[table] = _subst(rows, ids, label)
            continue
        kept = {str(k): _subst(v, ids, label) for k, v in rows.items() if str(k) not in ids}
        new = sorted((_subst(v, ids, label) for k, v in rows.items() if str(k) in ids),
                     key=lambda v: json.dumps(v, sort_keys=True, default=str))  # fmt: skip
        out[table] = {"kept": kept, "new": new}
    return out


def canonical_hash(db: Mapping[str, Any], initial: Mapping[str, Any]) -> str:
    """`content_hash` of `canonical_state`."""
    return content_hash(canonical_state(db, initial))


def same_final_state(db: Mapping[str, Any], gold_db: Mapping[str, Any], initial: Mapping[str, Any]) -> bool:
    """The verdict: the two final DBs are equal, or equal up to a renaming of the ids the runs generated."""
    return content_hash(db) == content_hash(gold_db) or canonical_hash(db, initial) == canonical_hash(gold_db, initial)
