"""The ``gust_sync`` trainer's hooks end to end, in verl's order, on CPU.

verl's ``AgentLoopWorker`` is built from the composed training config in simulated-user mode (offline user) and runs
every trajectory through ``_run_agent_loop``; the outputs are stored by verl's own
``AgentLoopWorkerTQ._agent_loop_postprocess`` (the V1 put) into an in-process TransferQueue stand-in
(`trainer.local_tq`); then ``GustTrainerSync._compute_advantage`` (verl's V1 ``_compute_advantage`` inside our
turn-record wrapper) and ``GustTrainerSync._compute_metrics``'s gust part read them back by the batch's keys.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.trainer import test_agent_loop as tal
from trainer.convert import write_rows
from trainer.launch import DataPlan, compose_config
from trainer.local_tq import LocalTQ, use_local_tq
from trainer.rehearse import _LocalRewardHandle
from trainer.user_agent_loop import user_sim_overrides

ASK = "Which order id should I look at?"
FINAL = "ORD-1001 was pending and is processing now; ORD-1003 is cancelled."
GOLD = [tal._call("get_order", {"order_id": "ORD-1001"}),
        tal._call("update_order_status", {"order_id": "ORD-1001", "new_status": "processing"})
        + tal._call("cancel_order", {"order_id": "ORD-1003"})]  # fmt: skip
SCRIPTS = {
    "g": [*GOLD, FINAL],  # no question
    "h": [ASK, *GOLD, FINAL],  # one question first
    "k": [ASK, ASK, *GOLD, FINAL],  # two questions first
    "m": [GOLD[0], ASK, GOLD[1], FINAL],  # a question between the tool turns
    "b": [GOLD[0], "ORD-1001 is pending."],  # a worse rollout (second group)
}
GROUPS = {"g0": "ghkm", "g1": "bg"}


@pytest.fixture()
def fake() -> Any:
    with use_local_tq() as store:
        yield store


def _worker_cls() -> type:
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    class Worker(AgentLoopWorker):  # the Ray actor's put, without the actor
        _agent_loop_postprocess = AgentLoopWorkerTQ.__ray_metadata__.modified_class._agent_loop_postprocess

    return Worker


def run_groups(algo: str, model_dir: Path, tmp: Path, fake: LocalTQ, monkeypatch: pytest.MonkeyPatch,
               extra: tuple[str, ...] = ()) -> Any:  # fmt: skip
    """Roll out GROUPS through verl's worker into ``fake``; return (config, keys)."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    for tag, script in SCRIPTS.items():
        monkeypatch.setitem(tal.SCRIPTS, tag, script)
    tags = "".join(GROUPS.values())
    data = write_rows(tmp / "train.parquet", tal._rows(tags))
    cfg = compose_config(algo, model=str(model_dir), plan=DataPlan(data, data, False, None), overrides=[
        *user_sim_overrides("offline"), "actor_rollout_ref.rollout.prompt_length=8192",
        "actor_rollout_ref.rollout.response_length=4096", f"actor_rollout_ref.rollout.n={len(GROUPS['g0'])}",
        *extra])  # fmt: skip
    rows = [r.model_dump(mode="json") for r in tal._rows(tags)]
    uids = [uid for uid, members in GROUPS.items() for _ in members]
    keys: list[str] = []

    async def go() -> None:
        reward = RewardLoopWorker(cfg)
        worker = _worker_cls()(cfg, llm_client=None, reward_loop_worker_handles=[_LocalRewardHandle(reward)])
        worker.llm_client = tal.TaggedPolicy(worker.tokenizer)
        for i, (row, uid) in enumerate(zip(rows, uids, strict=True)):
            session = sum(1 for u in uids[:i] if u == uid)
            kwargs = {"raw_prompt": row["prompt"], "tools_kwargs": row["extra_info"]["tools_kwargs"],
                      "extra_info": row["extra_info"], "reward_model": row["reward_model"],
                      "data_source": row["data_source"], "index": i, "global_steps": 1,
                      "interaction_kwargs": row["extra_info"].get("interaction_kwargs") or {}}  # fmt: skip
            trajectory = {"step": 1, "sample_index": i, "rollout_n": session, "validate": False}
            await worker._run_agent_loop({"temperature": 1.0}, trajectory, agent_name=row["agent_name"], trace=False,
                                         uid=uid, session_id=session, **kwargs)  # fmt: skip
            keys.append(f"{uid}_{session}_0")

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
    return cfg, keys


def _trainer(cfg: Any) -> Any:
    from trainer.v1_trainer import GustTrainerSync

    trainer = object.__new__(GustTrainerSync)  # the hooks need only the config (no workers on CPU)
    trainer.config = cfg
    return trainer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.rehearse import build_tiny_model

    corpus = [m.content for row in tal._rows("ghkmb") for m in row.prompt] + [t for s in SCRIPTS.values() for t in s]
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), corpus)


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["tara", "slca_tara", "slca", "toolpo"])
def test_equally_good_rollouts_with_different_user_turns_get_equal_advantages(
    algo: str, model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: LocalTQ
) -> None:
    from verl.trainer.ppo.v1 import PPOTrainerSync

    cfg, keys = run_groups(algo, model_dir, tmp_path, fake, monkeypatch)
    g0 = [k for k in keys if k.startswith("g0_")]
    extra = [fake.store[("train", k)]["extra_fields"] for k in g0]
    assert [len(json.loads(e["gust_user_turns"])) for e in extra] == [0, 1, 2, 1]  # the offline user answered
    infos = [e["reward_extra_info"] for e in extra]
    assert len({(float(i["score"]), i["turn_rewards"], float(i["r_sum"])) for i in infos}) == 1  # equally good
    meta = fake.meta(keys)
    _trainer(cfg)._compute_advantage(meta, {})
    adv = {k: fake.store[("train", k)]["advantages"] for k in keys}
    assert all(torch.count_nonzero(adv[k]) == 0 for k in g0), {k: adv[k].abs().max() for k in g0}
    g1 = [k for k in keys if k.startswith("g1_")]
    assert all(torch.count_nonzero(adv[k]) > 0 for k in g1)  # the other group still learns
    if algo in ("tara", "slca_tara"):  # verl's method WITHOUT the turn record: every generation was a turn
        PPOTrainerSync._compute_advantage(_trainer(cfg), fake.meta(g0), {})
        assert max(float(fake.store[("train", k)]["advantages"].abs().max()) for k in g0) > 0.1


@pytest.mark.slow
def test_metrics_hook_end_to_end_skips_padding(model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               fake: LocalTQ) -> None:  # fmt: skip
    from verl.trainer.ppo.v1 import PPOTrainerSync

    cfg, keys = run_groups("slca", model_dir, tmp_path, fake, monkeypatch)
    worse = next(k for k in keys if k.startswith("g1_0"))
    fake.copy_as_padding(worse, "pad_0")
    fake.copy_as_padding(worse, "pad_1")
    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda *a, **k: None)  # verl's own metrics: not ours
    metrics: dict[str, float] = {}
    _trainer(cfg)._compute_metrics(fake.meta([*keys, "pad_0", "pad_1"]), metrics, {}, 1, 0)
    infos = [fake.store[("train", k)]["extra_fields"]["reward_extra_info"] for k in keys]
    expected = sum(float(i["score"]) for i in infos) / len(infos)  # over the real samples only
    assert metrics["gust/score/mean"] == pytest.approx(expected)
    assert not math.isclose(expected, (sum(float(i["score"]) for i in infos) + 2 * float(infos[4]["score"])) / 8)
    assert metrics["gust/user_turns/mean"] == pytest.approx((0 + 1 + 2 + 1 + 0 + 0) / 6)
    assert metrics["gust/user_stop_rate"] == pytest.approx(1.0)
    assert metrics["gust/judge_failed/mean"] == 0.0
    assert ["extra_fields"] in fake.selected  # the field verl's put stores AgentLoopOutput.extra_fields under


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["offline", "end"])
def test_llm_user_down_pre_flight_fallback_and_metrics(policy: str, model_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, fake: LocalTQ) -> None:  # fmt: skip
    """An LLM user that is down: the launch's pre-flight names it; mid-rollout the documented fallback applies
    (``offline``: the offline user of the same scenario takes over; ``end``: the episode ends) and the trainer's
    metrics count it (``gust/user_failed/rate``)."""
    from trainer.launch import endpoint_problems

    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    down = ("++gust.user_simulator=llm", "++gust.user_llm.base_url=http://127.0.0.1:9/v1", "++gust.user_llm.model=m",
            "++gust.user_llm.max_retries=0", "++gust.user_llm.timeout_s=2", f"++gust.user_fallback={policy}")  # fmt: skip
    cfg, keys = run_groups("slca", model_dir, tmp_path, fake, monkeypatch, down)
    assert any("LLM simulated user endpoint http://127.0.0.1:9/v1" in line for line in endpoint_problems(cfg))
    extra = [fake.store[("train", k)]["extra_fields"] for k in keys]
    assert all(json.loads(e["gust_user_reasons"])[0] == "user_failed" for e in extra)
    metrics = _trainer(cfg).gust_metrics(fake.meta(keys))
    assert metrics["gust/user_failed/rate"] == 1.0
    if policy == "offline":  # the offline user answered the questions: same dialogues as the offline run
        assert [len(json.loads(e["gust_user_turns"])) for e in extra[:4]] == [0, 1, 2, 1]
        assert metrics["gust/user_stop_rate"] > 0
    else:
        assert all(json.loads(e["gust_user_turns"]) == [] for e in extra) and metrics["gust/user_turns/mean"] == 0
