"""Output rows of the preparation: LLaMA-Factory ShareGPT (SFT), `trainer.rows.VerlRow` (RL / test), sidecars.

RL and test rows are `VerlRow`s with NESTED gold (`gold_tool_calls` = JSON list of steps of `{name, arguments}`),
`args_known=True` and `turn_level=True` (each gold step is one assistant generation of the teacher trace).
What `VerlRow` has no column for (uuid, sample kind, the recorded observations and final answer, used by the
evaluator's replay responder and reports) goes to a `<name>.meta.jsonl` sidecar keyed by `extra_info.task_id`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from data.io import write_json, write_jsonl, write_parquet_rows
from data.verl_rows import write_verl_rows
from toucan.hermes import openai_tool, prompt_messages, tools_json
from toucan.models import ContextAction, Dialogue, Step
from toucan.prepare import Prepared
from trainer.rows import VerlRow

__all__ = [
    "DATA_SOURCE",
    "sharegpt_row",
    "task_id",
    "verl_row",
    "sample_meta",
    "meta_path",
    "write_prepared",
]

DATA_SOURCE = "toucan_toolcall"
_LF_DATASET_INFO = {
    "formatting": "sharegpt",
    "columns": {"messages": "conversations", "system": "system", "tools": "tools"},
}


def _function_call(step: Step) -> str:
    calls = [{"name": c.name, "arguments": c.arguments or {}} for c in step.calls]
    return json.dumps(calls[0] if len(calls) == 1 else calls, ensure_ascii=False)


def _observation(step: Step) -> str:
    # LLaMA-Factory's qwen template wraps one observation in a single <tool_response>; parallel results are
    # joined so that the rendered text holds one <tool_response> block per call.
    return "\n</tool_response>\n<tool_response>\n".join(step.responses)


def sharegpt_row(d: Dialogue) -> dict[str, Any]:
    """A whole dialogue in LLaMA-Factory ShareGPT form (human / function_call / observation / gpt).

    Assistant text written just before a call (a step preamble) has no slot in that format and is dropped, as in
    the reference materialiser.

    Args:
        d: A Phase-1-valid dialogue (every turn answered).

    Returns:
        `{"conversations", "system", "tools", "uuid", "subset_name"}`; `tools` is a JSON string.
    """
    conversations: list[dict[str, str]] = []
    for turn in d.turns:
        conversations.append({"from": "human", "value": turn.user})
        for step in turn.steps:
            conversations.append({"from": "function_call", "value": _function_call(step)})
            conversations.append({"from": "observation", "value": _observation(step)})
        conversations.append({"from": "gpt", "value": turn.answer or ""})
    tools = json.dumps([openai_tool(t)["function"] for t in d.tools], ensure_ascii=False)
    return {
        "conversations": conversations,
        "system": d.system,
        "tools": tools,
        "uuid": d.uuid,
        "subset_name": d.subset_name,
    }


def task_id(sample: ContextAction) -> str:
    """`<uuid>:<turn index>`: unique per sample, and the source dialogue's uuid is readable from it."""
    return f"{sample.uuid}:{sample.turn_index}"


def _gold_json(steps: Sequence[Step]) -> str:
    nested = [[{"name": c.name, "arguments": c.arguments or {}} for c in step.calls] for step in steps]
    return json.dumps(nested, ensure_ascii=False)


def verl_row(sample: ContextAction, *, index: int, split: str) -> VerlRow:
    """The verl RL row of a context-action sample (validated by `VerlRow`).

    Args:
        sample: The decision point.
        index: Row index within its split.
        split: "train" or "test".

    Returns:
        The validated row.
    """
    schemas = tools_json(sample.tools)
    has_gold = any(step.calls for step in sample.gold_steps)
    prompt = prompt_messages(sample.tools, sample.history, sample.question, system=sample.system)
    ground_truth = {
        "allowed_tools": tuple(t.name for t in sample.tools),
        "gold_tool_calls": _gold_json(sample.gold_steps),
        "args_known": True,
        "turn_level": True,
        "tool_schemas": schemas,
        "question_content": sample.question,
        "subset_name": "tool_call" if has_gold else "irrelevant",
    }
    extra_info = {
        "index": index,
        "split": split,
        "task_id": task_id(sample),
        "need_tools_kwargs": True,
        "original_turn_index": sample.turn_index,
        "tools_kwargs": {"sgls": {"create_kwargs": {"tool_schemas": schemas}}},
    }
    return VerlRow.model_validate(
        {
            "prompt": prompt,
            "data_source": DATA_SOURCE,
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": extra_info,
        }
    )


def sample_meta(sample: ContextAction) -> dict[str, Any]:
    """Sidecar record: what the evaluator needs beyond the verl row."""
    return {
        "task_id": task_id(sample),
        "sample_id": sample.sample_id,
        "uuid": sample.uuid,
        "dialogue_hash": sample.dialogue_hash,
        "kind": sample.kind.value,
        "turn_index": sample.turn_index,
        "subset_name": sample.subset_name,
        "gold_responses": [list(step.responses) for step in sample.gold_steps],
        "gold_answer": sample.gold_answer,
    }


def meta_path(parquet: Path) -> Path:
    """`test.parquet` -> `test.meta.jsonl`."""
    return Path(parquet).with_suffix(".meta.jsonl")


def _write_split(out_dir: Path, name: str, samples: Sequence[ContextAction], split: str) -> Path:
    rows = [verl_row(s, index=i, split=split).model_dump(mode="json") for i, s in enumerate(samples)]
    path = write_verl_rows(out_dir / f"{name}.parquet", rows)
    write_jsonl(meta_path(path), [sample_meta(s) for s in samples])
    return path


def write_prepared(prepared: Prepared, out_dir: Path) -> dict[str, Path]:
    """Write every artifact of phases 1-4 under `out_dir`.

    Files: `test.parquet` and `rl.parquet` (verl rows) with `.meta.jsonl` sidecars, `sft.parquet` (ShareGPT),
    `dataset_info.json` (LLaMA-Factory registration), `quarantine.jsonl`, `report.json` (phase accounting).

    Args:
        prepared: Output of `toucan.prepare.prepare`.
        out_dir: Destination folder.

    Returns:
        Artifact name -> path.
    """
    out_dir = Path(out_dir)
    paths = {
        "test": _write_split(out_dir, "test", prepared.test, "test"),
        "rl": _write_split(out_dir, "rl", prepared.rl, "train"),
        "sft": write_parquet_rows(out_dir / "sft.parquet", [sharegpt_row(d) for d in prepared.sft]),
        "dataset_info": write_json(
            out_dir / "dataset_info.json", {"toucan_sft": {"file_name": "sft.parquet", **_LF_DATASET_INFO}}
        ),
        "quarantine": write_jsonl(out_dir / "quarantine.jsonl", prepared.quarantine),
    }
    reports = [r.model_dump() | {"balanced": r.balanced} for r in prepared.reports]
    paths["report"] = write_json(out_dir / "report.json", {"phases": reports})
    return paths
