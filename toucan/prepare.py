"""Toucan SFT/RL preparation, phases 1-4 of SLCA-GRPO App. C.1.

1. Noise filtering and schema validation: parse/repair every row, drop with one reason code per row.
2. Evaluation isolation, before any split: a seeded held-out test set of native single-turn dialogues and of
   decomposed turns drawn from distinct multi-turn dialogues (whole dialogues leave the training pool).
3. Decomposition: every user turn >= `decompose_start_turn` that has gold calls becomes a context-action pair
   with the earlier turns as context (paper: turn >= 2; reference code: every turn, `decompose_start_turn=1`).
4. SFT / RL partition of the training pool (by dialogue): RL gets ~`rl_fraction`, ~2/3 native single-turn
   and ~1/3 decomposed multi-turn samples; SFT keeps every other dialogue whole (most native multi-turn data).
Every phase reports counts that add up to its inputs (`PhaseReport.balanced`).
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft7Validator
from jsonschema.exceptions import SchemaError as JSONSchemaError
from referencing.exceptions import Unresolvable

from data.models import QuarantineRecord
from gustforge.hashing import short_hash
from gustforge.registry import Registry
from gustforge.schemas import safe_validator
from toucan.config import ArgCheck, PrepareConfig
from toucan.models import ContextAction, Dialogue, DropReason, PhaseReport, RowRejected, SampleKind, Turn
from toucan.rows import RawRow, parse_row, quality_score

__all__ = [
    "NONSTANDARD_TOKENS",
    "ARG_CHECKS",
    "Prepared",
    "screen",
    "filter_rows",
    "eligible_turns",
    "context_action",
    "decompose",
    "isolate",
    "decompose_pool",
    "partition",
    "prepare",
]

STAGE = "toucan.prepare"
# Tool-protocol markers that must never appear inside natural-language content (they would teach the model to
# emit tool syntax in prose or break the Hermes parser): Hermes, ChatML, Qwen-Agent, Llama, Mistral.
NONSTANDARD_TOKENS = (
    "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<|im_start|>", "<|im_end|>",
    "✿FUNCTION✿", "✿ARGS✿", "✿RESULT✿", "✿RETURN✿", "<|python_tag|>", "[TOOL_CALLS]", "<function=",
    "<|tool_call|>",
)  # fmt: skip

ArgChecker = Callable[[dict[str, Any], dict[str, Any]], str | None]
ARG_CHECKS: Registry[ArgChecker] = Registry("argument check")


@ARG_CHECKS.register(ArgCheck.OFF.value)
def _check_off(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    return None


@ARG_CHECKS.register(ArgCheck.REQUIRED.value)
def _check_required(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    missing = [key for key in schema.get("required") or [] if key not in arguments]
    return f"missing required {missing}" if missing else None


@ARG_CHECKS.register(ArgCheck.FULL.value)
def _check_full(arguments: dict[str, Any], schema: dict[str, Any]) -> str | None:
    try:
        Draft7Validator.check_schema(schema)
        error = next(iter(safe_validator(schema, Draft7Validator).iter_errors(arguments)), None)
    except (JSONSchemaError, Unresolvable, re.error) as exc:  # a broken schema is the mismatch it causes
        return f"schema unusable: {type(exc).__name__}"
    return error.message if error is not None else None


@dataclass
class Prepared:
    """Everything phases 1-4 produce."""

    test: list[ContextAction] = field(default_factory=list)
    rl: list[ContextAction] = field(default_factory=list)
    sft: list[Dialogue] = field(default_factory=list)
    quarantine: list[QuarantineRecord] = field(default_factory=list)
    reports: list[PhaseReport] = field(default_factory=list)


# --------------------------------------------------------------------------------------------- phase 1


def _texts(turn: Turn) -> Iterable[str]:
    yield turn.user
    yield from (step.preamble for step in turn.steps)
    if turn.answer is not None:
        yield turn.answer


def _quality(d: Dialogue, cfg: PrepareConfig) -> tuple[DropReason, str] | None:
    checks = (
        (d.question_quality, cfg.min_question_quality, DropReason.LOW_QUESTION_QUALITY),
        (d.response_quality, cfg.min_response_quality, DropReason.LOW_RESPONSE_QUALITY),
    )
    for assessment, minimums, reason in checks:
        for dimension, minimum in sorted(minimums.items()):
            score = quality_score(assessment, dimension)
            if score is not None and score < minimum:
                return reason, f"{dimension}={score:g} < {minimum:g}"
    return None


def _calls_problem(d: Dialogue, cfg: PrepareConfig) -> tuple[DropReason, str] | None:
    tools = {t.name: t for t in d.tools}
    check = ARG_CHECKS.get(cfg.arg_check.value)
    for turn in d.turns:
        for call in (c for step in turn.steps for c in step.calls):
            if call.arguments is None:
                return DropReason.GOLD_ARGUMENTS_MISSING, f"{call.name}: gold has the name only"
            if call.name not in tools:
                return DropReason.UNKNOWN_TOOL, call.name
            problem = check(call.arguments, tools[call.name].parameters)
            if problem:
                return DropReason.ARGUMENTS_SCHEMA_MISMATCH, f"{call.name}: {problem}"
    return None


def screen(d: Dialogue, cfg: PrepareConfig) -> tuple[DropReason, str] | None:
    """Phase-1 content checks of one parsed dialogue (the first failing check wins).

    Args:
        d: The parsed dialogue.
        cfg: Thresholds and switches.

    Returns:
        `(reason, detail)` when the dialogue must be dropped, else None.
    """
    if d.subset_name in cfg.drop_subsets:
        return DropReason.IRRELEVANT_SUBSET, d.subset_name
    problem = _calls_problem(d, cfg)
    if problem is not None:
        return problem
    unanswered = [i for i, t in enumerate(d.turns) if t.answer is None]
    if unanswered:
        return DropReason.INCOMPLETE_DIALOGUE, f"no final assistant reply in turn {unanswered[0] + 1}"
    for text in (text for turn in d.turns for text in _texts(turn)):
        token = next((tok for tok in NONSTANDARD_TOKENS if tok in text), None)
        if token is not None:
            return DropReason.NONSTANDARD_TOOL_TOKENS, token
    return _quality(d, cfg)


def _parsed_or_reason(raw: RawRow, cfg: PrepareConfig) -> Dialogue | tuple[DropReason, str]:
    try:
        d = parse_row(raw)
    except RowRejected as exc:
        return exc.reason, exc.detail
    return screen(d, cfg) or d


def filter_rows(
    rows: Iterable[RawRow], cfg: PrepareConfig
) -> tuple[list[Dialogue], list[QuarantineRecord], PhaseReport]:
    """Phase 1: parse, repair, screen and de-duplicate (by uuid and by dialogue content).

    Args:
        rows: Raw input rows.
        cfg: Preparation config.

    Returns:
        The valid pool, one quarantine record per dropped row, and the phase report (unit: rows).
    """
    pool: list[Dialogue] = []
    quarantine: list[QuarantineRecord] = []
    repairs: Counter[str] = Counter()
    seen: set[str] = set()
    inputs = 0
    for raw in rows:
        inputs += 1
        outcome = _parsed_or_reason(raw, cfg)
        if isinstance(outcome, Dialogue) and ({outcome.uuid, outcome.dialogue_hash} & seen):
            outcome = DropReason.DUPLICATE_DIALOGUE, f"uuid {outcome.uuid} / dialogue {outcome.dialogue_hash}"
        if isinstance(outcome, Dialogue):
            seen.update((outcome.uuid, outcome.dialogue_hash))
            repairs.update(f"repair:{code}" for code in outcome.repairs)
            repairs["repaired_rows"] += bool(outcome.repairs)
            pool.append(outcome)
            continue
        reason, detail = outcome
        quarantine.append(QuarantineRecord(item_id=f"row:{raw.index}", stage=STAGE, reason=reason, detail=detail))
    dropped = Counter(q.reason for q in quarantine)
    report = PhaseReport(
        phase="1_filter", unit="rows", inputs=inputs, outputs={"valid": len(pool)}, dropped=dict(dropped),
        info=dict(repairs),
    )  # fmt: skip
    return pool, quarantine, report


# ------------------------------------------------------------------------------------------ phase 2, 3


def eligible_turns(d: Dialogue, start_turn: int) -> list[int]:
    """0-based indices of the turns that decompose (1-based index >= start_turn, with gold calls)."""
    return [i for i, turn in enumerate(d.turns) if i + 1 >= start_turn and turn.has_calls]


def context_action(d: Dialogue, turn_index: int, kind: SampleKind) -> ContextAction:
    """The decision point at user turn `turn_index` (0-based): earlier turns as context, its calls as gold."""
    turn = d.turns[turn_index]
    return ContextAction(
        sample_id=short_hash({"dialogue": d.dialogue_hash, "turn": turn_index}, 16),
        uuid=d.uuid,
        dialogue_hash=d.dialogue_hash,
        kind=kind,
        turn_index=turn_index,
        system=d.system,
        tools=d.tools,
        history=d.turns[:turn_index],
        question=turn.user,
        gold_steps=turn.steps,
        gold_answer=turn.answer,
        subset_name=d.subset_name,
    )


def decompose(d: Dialogue, *, start_turn: int) -> list[ContextAction]:
    """Phase 3 for one multi-turn dialogue: one context-action pair per eligible turn."""
    return [context_action(d, i, SampleKind.DECOMPOSED_MULTI_TURN) for i in eligible_turns(d, start_turn)]


def _scaled(target: int, pool_size: int, reference: int, available: int) -> int:
    if target == 0 or available == 0:
        return 0
    return min(available, target, max(1, round(target * pool_size / reference)))


def _by_hash(dialogues: Iterable[Dialogue]) -> list[Dialogue]:
    return sorted(dialogues, key=lambda d: d.dialogue_hash)  # input order never changes the draw


def isolate(pool: Sequence[Dialogue], cfg: PrepareConfig) -> tuple[list[ContextAction], list[Dialogue], PhaseReport]:
    """Phase 2: draw the held-out test set from the valid pool before any split.

    Test sizes are the configured ones scaled by `len(pool) / reference_pool_size` (at least 1 when possible,
    at most the configured size). A held-out multi-turn dialogue gives ONE decomposed turn and leaves the
    training pool entirely.

    Args:
        pool: The Phase-1 valid pool.
        cfg: Preparation config.

    Returns:
        Test samples, the training pool (dialogues), and the phase report (unit: dialogues).
    """
    rng = random.Random(f"{cfg.seed}:isolate")
    singles = _by_hash(d for d in pool if not d.multi_turn and d.turns[0].has_calls)
    multis = _by_hash(d for d in pool if d.multi_turn and eligible_turns(d, cfg.decompose_start_turn))
    n_single = _scaled(cfg.test_single_turn, len(pool), cfg.reference_pool_size, len(singles))
    n_multi = _scaled(cfg.test_multi_turn, len(pool), cfg.reference_pool_size, len(multis))
    test = [context_action(d, 0, SampleKind.NATIVE_SINGLE_TURN) for d in rng.sample(singles, n_single)]
    for d in rng.sample(multis, n_multi):
        turn = rng.choice(eligible_turns(d, cfg.decompose_start_turn))
        test.append(context_action(d, turn, SampleKind.DECOMPOSED_MULTI_TURN))
    held = {s.dialogue_hash for s in test}
    train = [d for d in pool if d.dialogue_hash not in held]
    outputs = {"test_single_turn": n_single, "test_multi_turn": n_multi, "training_pool": len(train)}
    return test, train, PhaseReport(phase="2_isolate", unit="dialogues", inputs=len(pool), outputs=outputs)


def decompose_pool(train: Sequence[Dialogue], cfg: PrepareConfig) -> tuple[dict[str, list[ContextAction]], PhaseReport]:
    """Phase 3 over the training pool's multi-turn dialogues.

    Returns:
        dialogue_hash -> its context-action pairs (decomposable dialogues only), and the report (dialogues).
    """
    multi = [d for d in train if d.multi_turn]
    pairs = {d.dialogue_hash: decompose(d, start_turn=cfg.decompose_start_turn) for d in multi}
    pairs = {h: samples for h, samples in pairs.items() if samples}
    report = PhaseReport(
        phase="3_decompose", unit="dialogues", inputs=len(multi),
        outputs={"decomposable": len(pairs), "no_eligible_turn": len(multi) - len(pairs)},
        info={"context_action_pairs": sum(map(len, pairs.values())), "start_turn": cfg.decompose_start_turn},
    )  # fmt: skip
    return pairs, report


def partition(
    train: Sequence[Dialogue], pairs: dict[str, list[ContextAction]], cfg: PrepareConfig
) -> tuple[list[Dialogue], list[ContextAction], PhaseReport]:
    """Phase 4: split the training pool by dialogue: SFT (whole dialogues), RL (context-action samples).

    Args:
        train: The training pool.
        pairs: Phase-3 pairs per decomposable dialogue.
        cfg: Preparation config.

    Returns:
        SFT dialogues, RL samples, and the report (unit: dialogues).
    """
    rng = random.Random(f"{cfg.seed}:partition")
    rl_target = round(cfg.rl_fraction * len(train))
    single_target = round(rl_target * cfg.rl_single_share)
    singles = _by_hash(d for d in train if not d.multi_turn and d.turns[0].has_calls)
    rl_single = rng.sample(singles, min(single_target, len(singles)))
    rl = [context_action(d, 0, SampleKind.NATIVE_SINGLE_TURN) for d in rl_single]
    rl_multi: list[Dialogue] = []
    for d in rng.sample(_by_hash(d for d in train if d.dialogue_hash in pairs), len(pairs)):
        if len(rl) >= rl_target:
            break
        rl_multi.append(d)
        rl.extend(pairs[d.dialogue_hash])
    taken = {d.dialogue_hash for d in (*rl_single, *rl_multi)}
    sft = [d for d in train if d.dialogue_hash not in taken]
    decomposed = sum(s.kind is SampleKind.DECOMPOSED_MULTI_TURN for s in rl)
    report = PhaseReport(
        phase="4_partition", unit="dialogues", inputs=len(train),
        outputs={"sft": len(sft), "rl_single_turn": len(rl_single), "rl_multi_turn": len(rl_multi)},
        info={"rl_samples": len(rl), "rl_native_single_turn": len(rl_single), "rl_decomposed": decomposed},
    )  # fmt: skip
    return sft, rl, report


def prepare(rows: Iterable[RawRow], cfg: PrepareConfig) -> Prepared:
    """Run phases 1-4.

    Args:
        rows: Raw input rows (`toucan.rows.iter_raw_rows`).
        cfg: Preparation config.

    Returns:
        Test, RL and SFT data, the quarantine and one report per phase; outputs are sorted by id.
    """
    pool, quarantine, r1 = filter_rows(rows, cfg)
    test, train, r2 = isolate(pool, cfg)
    pairs, r3 = decompose_pool(train, cfg)
    sft, rl, r4 = partition(train, pairs, cfg)
    return Prepared(
        test=sorted(test, key=lambda s: s.sample_id),
        rl=sorted(rl, key=lambda s: s.sample_id),
        sft=sorted(sft, key=lambda d: d.uuid),
        quarantine=quarantine,
        reports=[r1, r2, r3, r4],
    )
