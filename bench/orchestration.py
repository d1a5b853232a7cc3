"""Orchestration benchmark: what Prefect costs on top of the stage functions, what a cached rerun costs, and how
the local thread runner compares with Ray on the 572-toolset Toucan corpus.

Run: `.venv/bin/python bench/orchestration.py [--corpus] [--workers 2]`; prints one JSON object.

* `direct`: every stage function of `tasks.stage_table` called in this process, no Prefect (the baseline).
* `prefect_cold`: `gust build` in a fresh process with the embedded ephemeral server (server start included).
* `prefect_cached`: the same command again on the same output folder (every stage is a cache hit).
* `--corpus`: `gust build` on the corpus with `--runner local` vs `--runner ray`, as a ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envgen.stage import bundled_sample_inputs, ingest_inputs  # noqa: E402
from gustforge.config import load_config  # noqa: E402
from tasks.stage_table import STAGE_ORDER, STAGES  # noqa: E402

CORPUS = ROOT / ".." / "shared" / "corpora" / "toucan" / "toucan_mcp_servers.remote_valid.jsonl"


def run_direct(inputs: list[Path], out: Path) -> float:
    """All stages without Prefect, one shard per stage."""
    cfg = load_config(None, [], out=out)
    started = time.perf_counter()
    items: Any = ingest_inputs(inputs, cfg).toolsets
    for stage in STAGE_ORDER:
        items = STAGES.get(stage).run(items, cfg, out).items
    return time.perf_counter() - started


def run_cli(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "flows.cli", "build", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"gust build {' '.join(args)} failed:\n{done.stderr[-4000:]}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", action="store_true", help="also compare local vs Ray on the Toucan corpus")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="gust-bench-"))
    env = {**os.environ, "PREFECT_HOME": str(tmp / "prefect-home")}
    results: dict[str, Any] = {}
    sample = list(bundled_sample_inputs())
    results["direct_s"] = round(run_direct(sample, tmp / "direct"), 2)
    results["prefect_cold_s"] = round(run_cli(["--out", str(tmp / "flow")], env), 2)
    results["prefect_cached_s"] = round(run_cli(["--out", str(tmp / "flow")], env), 2)
    results["prefect_overhead_ratio"] = round(results["prefect_cold_s"] / results["direct_s"], 2)
    if args.corpus:
        common = ["--input", str(CORPUS), "--workers", str(args.workers), "--set", "runner.shard_size=48"]
        results["corpus_local_s"] = round(run_cli([*common, "--runner", "local", "--out", str(tmp / "local")], env), 1)
        results["corpus_ray_s"] = round(run_cli([*common, "--runner", "ray", "--out", str(tmp / "ray")], env), 1)
        results["ray_vs_local_ratio"] = round(results["corpus_ray_s"] / results["corpus_local_s"], 2)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
