"""An in-process stand-in for TransferQueue's key-value API (what verl 0.9.1's V1 trainer and AgentLoopWorkerTQ call),
for CPU tests of the ``gust_sync`` hooks. Like the real ``kv_batch_get``, selecting a field that no sample holds
silently leaves it out of the returned TensorDict (``BatchMeta.select_fields`` keeps only known fields); the store is
filled by verl's own ``AgentLoopWorkerTQ._agent_loop_postprocess`` in the tests, so the field names are verl's."""

from __future__ import annotations

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


class FakeTQ:
    """keys → per-sample field dicts, per partition."""

    def __init__(self) -> None:
        self.store: dict[tuple[str, str], dict[str, Any]] = {}
        self.tags: dict[tuple[str, str], dict[str, Any]] = {}
        self.selected: list[list[str]] = []

    def init(self, *_: Any, **__: Any) -> None:
        return None

    async def async_kv_put(self, key: str, partition_id: str, tag: dict | None = None, **_: Any) -> None:
        return None  # prompt-level status tags; not read by the hooks under test

    async def async_kv_batch_put(self, keys: list[str], fields: TensorDict, tags: list[dict], partition_id: str) -> None:
        for i, key in enumerate(keys):
            self.store[(partition_id, key)] = {name: _item(fields, name, i) for name in fields.keys()}
            self.tags[(partition_id, key)] = dict(tags[i])

    def copy_as_padding(self, key: str, new_key: str, partition_id: str = "train") -> None:
        """What verl's upsampling does: a copy of a sample under a new key, tagged ``is_padding``."""
        self.store[(partition_id, new_key)] = dict(self.store[(partition_id, key)])
        self.tags[(partition_id, new_key)] = {**self.tags[(partition_id, key)], "is_padding": True}

    def meta(self, keys: list[str], partition_id: str = "train") -> KVBatchMeta:
        return KVBatchMeta(keys=list(keys), tags=[self.tags[(partition_id, k)] for k in keys], partition_id=partition_id)

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
