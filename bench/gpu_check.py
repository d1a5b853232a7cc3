"""GPU check: estimators + verl's policy loss on CUDA at B = 2048, T = 8192, and one SLCA-routed training step.

1. ``slca``, ``tara``, ``slca_tara`` and ``toolpo`` on CUDA tensors (B = 2048, T = 8192, multi-turn masks,
   rewards laid out by `trainer.reward_manager`), timed with CUDA events; each output must equal the CPU result.
2. verl's ``vanilla`` PPO policy loss (``get_policy_loss_fn``) forward + backward on CUDA at the same size.
3. A tiny Qwen2 built from a config (random weights, no download): log-probs of the response tokens, SLCA
   advantages, verl's policy loss, backward, one AdamW step. Isolation is asserted on the GPU: changing only
   R_sum leaves d loss / d log-prob on every tool token bit-identical and changes it on summary tokens.
0. Launch readiness: every shipped config composed for THIS machine (``trainer.nnodes=1``,
   ``trainer.n_gpus_per_node=<visible GPUs>``) and validated with verl's checks; dynamic batch sizing on with a
   per-GPU token budget that holds one full trajectory; absolute data paths.
4. ``gust train --rehearse`` for every algorithm (`trainer.rehearse`: verl's AgentLoopWorker, RewardLoopWorker,
   V1 compute_advantage and policy loss with the scripted policy) with the backward pass of the tiny model on CUDA;
   every invariant must hold.

Exits with status 0 and a "SKIPPED" message when no CUDA device exists (nothing is run then).
Run: .venv/bin/python bench/gpu_check.py [--rows 2048] [--tokens 8192] [--repeat 10] [--json out.json]
``--cpu-smoke --rows 64 --tokens 1024 --repeat 1`` runs the same code paths on the CPU (to check the script; the
rehearsal then covers ``--rehearse-algos``, default slca only on the CPU, all five on CUDA).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# The repository first: this folder also holds modules named like packages (bench/envgen.py shadows envgen/).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch


def _cuda_ms(fn, repeat: int, device: str = "cuda") -> float:  # type: ignore[no-untyped-def]
    if device != "cuda":  # CPU smoke run: wall clock
        import time

        start_s = time.perf_counter()
        for _ in range(repeat):
            fn()
        return (time.perf_counter() - start_s) * 1e3 / repeat
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeat):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeat


def _masks(rows: int, tokens: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    mask = torch.zeros(rows, tokens, dtype=torch.int64)
    for i in range(rows):
        pos = 0
        for _ in range(int(torch.randint(1, 8, (1,), generator=gen))):
            length = int(torch.randint(50, 1200, (1,), generator=gen))
            mask[i, pos : pos + length] = 1
            pos += length + int(torch.randint(30, 600, (1,), generator=gen))
            if pos >= tokens:
                break
    return mask


def _infos(rows: int, seed: int, r_sum_shift: float = 0.0) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(rows):
        r_tool, r_sum = float(torch.rand(1, generator=gen)), float(torch.randint(0, 5, (1,), generator=gen)) / 4
        turns = [float(v) for v in torch.randint(0, 2, (6,), generator=gen)]
        r_sum += r_sum_shift
        out.append({"score": r_tool + r_sum, "r_tool": r_tool, "r_sum": r_sum, "omission": 0,
                    "turn_rewards": json.dumps(turns)})  # fmt: skip
    return out


def check_estimators(rows: int, tokens: int, repeat: int, device: str) -> dict:
    import numpy as np

    from trainer.estimators import (
        compute_slca_advantage,
        compute_slca_tara_advantage,
        compute_tara_advantage,
        compute_toolpo_advantage,
    )
    from trainer.reward_manager import layout_for_estimator, place_rewards

    mask, infos = _masks(rows, tokens, seed=0), _infos(rows, seed=1)
    uids = np.array([f"uid-{i // 16}" for i in range(rows)], dtype=object)
    fns = {"slca": compute_slca_advantage, "tara": compute_tara_advantage,
           "slca_tara": compute_slca_tara_advantage, "toolpo": compute_toolpo_advantage}  # fmt: skip
    results = {}
    for name, fn in fns.items():
        layout = layout_for_estimator(name)
        rewards = torch.stack([place_rewards(mask[i], info, layout=layout) for i, info in enumerate(infos)])
        cpu = fn(rewards, mask, uids, None)[0]
        r_gpu, m_gpu = rewards.to(device), mask.to(device)
        ms = _cuda_ms(lambda: fn(r_gpu, m_gpu, uids, None), repeat, device)  # noqa: B023
        gpu = fn(r_gpu, m_gpu, uids, None)[0].cpu()
        if not torch.allclose(gpu, cpu, atol=1e-5):
            raise AssertionError(f"{name}: CUDA and CPU advantages differ")
        results[name] = round(ms, 3)
        print(f"{name:10s} {ms:8.2f} ms on {device} (B={rows}, T={tokens}); equals CPU")
    return results


def check_policy_loss(rows: int, tokens: int, repeat: int, device: str) -> float:
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import FSDPActorConfig

    config = FSDPActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=16)
    loss_fn = get_policy_loss_fn("vanilla")
    mask = _masks(rows, tokens, seed=2).to(device).float()
    old = -torch.rand(rows, tokens, device=device)
    adv = torch.randn(rows, tokens, device=device)
    log_prob = (old + 0.1 * torch.randn_like(old)).requires_grad_(True)

    def step() -> None:
        loss, _ = loss_fn(old_log_prob=old, log_prob=log_prob, advantages=adv, response_mask=mask,
                          loss_agg_mode="token-mean", config=config)  # fmt: skip
        loss.backward()
        log_prob.grad = None

    ms = _cuda_ms(step, repeat, device)
    print(f"verl vanilla policy loss fwd+bwd {ms:8.2f} ms on {device} (B={rows}, T={tokens})")
    return ms


def check_tiny_model_step(device: str) -> dict:
    import numpy as np
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import FSDPActorConfig

    from trainer.estimators import compute_slca_advantage, segment_runs
    from trainer.reward_manager import place_rewards

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)  # fmt: skip
    model = Qwen2ForCausalLM(cfg).to(device)
    batch, prompt, resp = 8, 32, 96
    ids = torch.randint(0, 512, (batch, prompt + resp), device=device)
    mask = torch.zeros(batch, resp, dtype=torch.int64)
    for i in range(batch):  # tool turns, observations, summary
        mask[i, 0:20] = 1
        mask[i, 30 : 45 + i] = 1
        mask[i, 70 : 90 - i] = 1
    uids = np.array(["g"] * batch, dtype=object)

    def advantages(shift: float) -> torch.Tensor:
        infos = _infos(batch, seed=3, r_sum_shift=0.0)
        infos[0]["r_sum"] += shift  # only R_sum of row 0 changes
        rewards = torch.stack([place_rewards(mask[i], info, layout="slca") for i, info in enumerate(infos)])
        return compute_slca_advantage(rewards.to(device), mask.to(device), uids, None)[0]

    logits = model(input_ids=ids).logits[:, prompt - 1 : -1].float()
    log_prob = torch.log_softmax(logits, -1).gather(-1, ids[:, prompt:].unsqueeze(-1)).squeeze(-1)
    old = log_prob.detach()
    actor = FSDPActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=batch)
    loss_fn = get_policy_loss_fn("vanilla")
    grads, losses = [], []
    for shift in (0.0, 0.5):
        loss, _ = loss_fn(old_log_prob=old, log_prob=log_prob, advantages=advantages(shift),
                          response_mask=mask.to(device).float(), loss_agg_mode="token-mean", config=actor)  # fmt: skip
        grads.append(torch.autograd.grad(loss, log_prob, retain_graph=True)[0])
        losses.append(loss)
    runs = segment_runs(mask.to(device))
    summary = runs.run_id == (runs.n_runs - 1).unsqueeze(1)
    tool = runs.mask & ~summary
    if not torch.equal(grads[0][tool], grads[1][tool]):
        raise AssertionError("isolation violated: tool-token gradients changed with R_sum only")
    if torch.equal(grads[0][summary], grads[1][summary]):
        raise AssertionError("summary-token gradients did not react to R_sum")
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    losses[0].backward()
    optim.step()
    moved = sum(int(not torch.equal(b, p.detach())) for b, p in zip(before, model.parameters(), strict=True))
    if not torch.isfinite(losses[0]) or moved == 0:
        raise AssertionError("training step produced no finite update")
    print(f"tiny Qwen2 step: loss {losses[0].item():.5f}, {moved} parameter tensors updated, isolation holds")
    return {"loss": losses[0].item(), "updated_tensors": moved, "isolation": True}


def check_rehearsal(algos: list[str], device: str) -> dict:
    import tempfile

    from trainer.rehearse import rehearse

    results = {}
    with tempfile.TemporaryDirectory(prefix="gust-gpu-rehearsal-") as tmp:
        for algo in algos:
            report = rehearse(algo, out_dir=f"{tmp}/{algo}", max_rows=1, device=device)
            failed = [c["name"] for c in report["checks"] if not c["passed"]]
            results[algo] = {"passed": report["passed"], "failed_checks": failed,
                             "gradients": report["gradients"], "advantage": report["advantage"],
                             "isolation": report["isolation"]}  # fmt: skip
            print(f"rehearsal {algo:9s} on {report['gradients']['device']}: "
                  f"{'PASSED' if report['passed'] else 'FAILED ' + ', '.join(failed)}; "
                  f"grad norm {report['gradients']['grad_norm']:.6f}")
    if not all(r["passed"] for r in results.values()):
        raise AssertionError(f"rehearsal failed: { {a: r['failed_checks'] for a, r in results.items()} }")
    return results


def check_launch_configs(gpus: int) -> dict:
    """Compose + validate every shipped config for one node with ``gpus`` GPUs (what a first launch here would use)."""
    from trainer.launch import ALGOS, compose_config, validate_training_config

    results = {}
    for algo in ALGOS:
        cfg = compose_config(algo, overrides=["trainer.nnodes=1", f"trainer.n_gpus_per_node={gpus}"])
        validate_training_config(cfg)
        actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
        trajectory = int(cfg.data.max_prompt_length) + int(cfg.data.max_response_length)
        budgets = (int(actor.ppo_max_token_len_per_gpu), int(rollout.log_prob_max_token_len_per_gpu))
        assert actor.use_dynamic_bsz and rollout.log_prob_use_dynamic_bsz, f"{algo}: dynamic batch sizing off"
        assert min(budgets) >= trajectory, f"{algo}: token budget {budgets} < one trajectory ({trajectory})"
        assert Path(cfg.data.train_files).is_absolute(), f"{algo}: relative data path"
        results[algo] = {"token_budget_per_gpu": budgets, "trajectory_tokens": trajectory,
                         "epochs": int(cfg.trainer.total_epochs)}  # fmt: skip
        print(f"launch config {algo:9s}: validated for 1 node x {gpus} GPU(s); token budget/GPU {budgets[0]} "
              f">= one trajectory {trajectory}; {cfg.trainer.total_epochs} epoch(s)")
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2048)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--json", default=None, help="write the measurements here")
    parser.add_argument("--cpu-smoke", action="store_true", help="run the same code on CPU (tiny sizes; no GPU claim)")
    parser.add_argument("--rehearse-algos", default=None,
                        help="comma-separated algorithms to rehearse (default: all on CUDA, slca on --cpu-smoke)")
    args = parser.parse_args()
    if args.cpu_smoke:
        device, name = "cpu", "CPU smoke run (NOT a GPU check)"
    elif torch.cuda.is_available():
        device, name = "cuda", torch.cuda.get_device_name(0)
    else:
        print("NOT RUN: no CUDA device (torch.cuda.is_available() is False); nothing was checked.")
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump({"status": "not_run", "reason": "no CUDA device"}, handle, indent=2)
        return NOT_RUN_EXIT
    print(f"device: {name}, torch {torch.__version__}")
    report = {
        "status": "cpu_smoke" if args.cpu_smoke else "passed",
        "device": name,
        "launch_configs": check_launch_configs(max(torch.cuda.device_count(), 1) if device == "cuda" else 1),
        "estimators_ms": check_estimators(args.rows, args.tokens, args.repeat, device),
        "policy_loss_ms": check_policy_loss(args.rows, args.tokens, args.repeat, device),
        "tiny_model": check_tiny_model_step(device),
    }
    from trainer.launch import ALGOS

    algos = args.rehearse_algos.split(",") if args.rehearse_algos else (["slca"] if args.cpu_smoke else list(ALGOS))
    report["rehearsal"] = check_rehearsal(algos, device)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=2)
    print("CPU smoke passed (NOT a GPU check)" if args.cpu_smoke else "GPU check passed")
    return 0


NOT_RUN_EXIT = 77  # the automake/ctest convention for "skipped": distinct from both pass (0) and fail (1)


if __name__ == "__main__":
    sys.exit(main())
