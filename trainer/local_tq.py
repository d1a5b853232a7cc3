"""An in-process stand-in for TransferQueue's key-value API (what verl 0.9.1's V1 trainer and ``AgentLoopWorkerTQ``
call), for the CPU rehearsal and tests of the ``gust_sync`` hooks.

Why: the real TransferQueue runs storage actors on Ray and needs ≥16 CPU slots (it hangs on a 2-core box, see
verl-on-cpu.md §4), so a CPU rehearsal cannot start it. ``use_local_tq()`` swaps the ``tq`` module that verl's
``agent_loop_tq`` and ``trainer_base`` modules (and ours) use for a ``LocalTQ`` for the duration of a block and
restores it afterwards; verl's code runs unchanged on top of it. The store is filled by verl's own
``AgentLoopWorkerTQ._agent_loop_postprocess``, so the field names are verl's. Like the real ``kv_batch_get``,
selecting a field that no sample holds silently leaves it out of the returned TensorDict
(``BatchMeta.select_fields`` keeps only known fields), so a wrong field name fails where it would on a GPU.
Never used by a real launch.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from tensordict import NonTensorStack, TensorDict
from transfer_queue.metadata import KVBatchMeta
from verl.utils.tensordict_utils import list_of_dict_to_tensordict


def _item(fields: TensorDict, name: str, i: int) -> Any:
    value = fields.get(name)
    if isinstance(value, NonTensorStack):
        return value.tolist()[i]
    if isinstance(value, torch.Tensor) and value.is_nested:
        return value.unbind()[i]
    return value[i]


__all__ = ["LocalTQ", "use_local_tq"]


class LocalTQ:
    """keys → per-sample field dicts, per partition."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.tags: dict[tuple[str, str], dict[str, Any]] = {}
        self.selected: list[list[str]] = []

    def init(self, *_: Any, **__: Any) -> None:
        return None

    async def async_kv_put(self, key: str, partition_id: str, tag: dict | None = None, **_: Any) -> None:
        return None  # prompt-level status tags; not read by the hooks under test

    async def async_kv_batch_put(self, keys: list[str], fields: TensorDict, tags: list[dict],
                                 partition_id: str) -> None:  # fmt: skip
        for i, key in enumerate(keys):
            self.store[(partition_id, key)] = {name: _item(fields, name, i) for name in fields.keys()}
            self.tags[(partition_id, key)] = dict(tags[i])

    def copy_as_padding(self, key: str, new_key: str, partition_id: str = "train") -> None:
        """What verl's upsampling does: a copy of a sample under a new key, tagged ``is_padding``."""
        self.store[(partition_id, new_key)] = dict(self.store[(partition_id, key)])
        self.tags[(partition_id, new_key)] = {**self.tags[(partition_id, key)], "is_padding": True}

    def meta(self, keys: list[str], partition_id: str = "train") -> KVBatchMeta:
        tags = [self.tags[(partition_id, k)] for k in keys]
        return KVBatchMeta(keys=list(keys), tags=tags, partition_id=partition_id)

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str] | str | None = None) -> Any:
        rows = [self.store[(partition_id, k)] for k in keys]
        wanted = [select_fields] if isinstance(select_fields, str) else list(select_fields or rows[0])
        self.selected.append(wanted)
        names = [f for f in wanted if all(f in r for r in rows)]
        if not names:
            return TensorDict({}, batch_size=[len(rows)])
        return list_of_dict_to_tensordict([{f: r[f] for f in names} for r in rows])

    def kv_batch_put(self, keys: list[str], partition_id: str, fields: TensorDict) -> KVBatchMeta:
        for i, key in enumerate(keys):
            self.store[(partition_id, key)].update({name: _item(fields, name, i) for name in fields.keys()})
        return self.meta(keys, partition_id)


@contextmanager
def use_local_tq(store: LocalTQ | None = None) -> Iterator[LocalTQ]:
    """Route verl's and our ``transfer_queue`` calls to ``store`` (a fresh ``LocalTQ`` by default) inside the block."""
    import verl.trainer.ppo.v1.agent_loop_tq as loop_tq
    import verl.trainer.ppo.v1.trainer_base as base

    store = store or LocalTQ()
    saved = (sys.modules.get("transfer_queue"), loop_tq.tq, base.tq)
    sys.modules["transfer_queue"] = store  # type: ignore[assignment]  # our lazy `import transfer_queue as tq`
    loop_tq.tq, base.tq = store, store
    try:
        yield store
    finally:
        if saved[0] is None:
            sys.modules.pop("transfer_queue", None)
        else:
            sys.modules["transfer_queue"] = saved[0]
        loop_tq.tq, base.tq = saved[1], saved[2]
