"""Final-state verdicts modulo creation order (`data.state_canon`)."""

from __future__ import annotations

from data.state_canon import canonical_hash, generated_ids, same_final_state
from gustforge.hashing import content_hash

INITIAL = {"tickets": {"T-1": {"id": "T-1", "subject": "old"}}, "customers": {"C-1": {"id": "C-1", "tickets": ["T-1"]}},
           "log": {}}  # fmt: skip


def _create(db, subjects):
    """Create tickets in the given order (ids T-2, T-3, … by creation order), linking each to C-1 and the log."""
    import copy

    db = copy.deepcopy(db)
    for subject in subjects:
        new = f"T-{len(db['tickets']) + 1}"
        db["tickets"][new] = {"id": new, "subject": subject}
        db["customers"]["C-1"]["tickets"].append(new)
        entry = f"L-{len(db['log']) + 1}"
        db["log"][entry] = {"id": entry, "action": "create", "ticket_id": new}
    return db


def test_two_creation_orders_are_the_same_state():
    a, b = _create(INITIAL, ["refund", "late"]), _create(INITIAL, ["late", "refund"])
    assert content_hash(a) != content_hash(b)  # the plain hash depends on the order of the creates
    assert generated_ids(a, INITIAL) == {"T-2", "T-3", "L-1", "L-2"}
    assert canonical_hash(a, INITIAL) == canonical_hash(b, INITIAL)
    assert same_final_state(a, b, INITIAL)


def test_a_different_state_still_differs():
    gold = _create(INITIAL, ["refund", "late"])
    assert not same_final_state(_create(INITIAL, ["refund", "early"]), gold, INITIAL)
    assert not same_final_state(_create(INITIAL, ["refund"]), gold, INITIAL)
    assert not same_final_state(_create(INITIAL, ["refund", "late", "late"]), gold, INITIAL)
    edited = _create(INITIAL, ["late", "refund"])
    edited["tickets"]["T-1"]["subject"] = "changed"
    assert not same_final_state(edited, gold, INITIAL)


def test_references_between_new_records_count():
    gold = _create(INITIAL, ["refund", "late"])
    swapped = _create(INITIAL, ["refund", "late"])
    swapped["log"]["L-1"]["ticket_id"], swapped["log"]["L-2"]["ticket_id"] = "T-3", "T-2"
    assert same_final_state(swapped, swapped, INITIAL) and same_final_state(gold, gold, INITIAL)
    # the log entries only differ by which new ticket they point to; both point to a new ticket of equal shape
    assert canonical_hash(swapped, INITIAL) != canonical_hash({**gold, "log": {}}, INITIAL)


def test_no_generated_ids_is_plain_equality():
    assert same_final_state(INITIAL, INITIAL, INITIAL)
    assert canonical_hash(INITIAL, INITIAL) == content_hash(dict(INITIAL))
