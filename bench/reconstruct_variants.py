"""What write-flow variants cost the reconstruct stage: the same environments and skeletons reconstructed with
`state_variants=1` (one trace per skeleton, the baseline) and with the configured default, in one run.

Reads a finished build's sampled skeletons (`OUT/work/sample.jsonl`, `OUT/envs/`, `OUT/tdg/`) and reports per
setting the traces attempted, kept and state-changing, the wall time, and the ratios to the baseline (speed is a
ratio within one run, never an absolute figure).

Run from the repository root: `.venv/bin/python bench/reconstruct_variants.py OUT [--limit 40]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from data.graphs import read_graph  # noqa: E402
from data.models import Skeleton  # noqa: E402
from envgen.stage import load_env  # noqa: E402
from gustforge.shards import resolve_path  # noqa: E402
from tdg.config import TDGConfig  # noqa: E402
from tdg.reconstruct import changes_state, reconstruct_all  # noqa: E402


def _measure(items: list[dict], out: Path, cfg: TDGConfig, variants: int) -> dict[str, float]:
    attempted = kept = writes = 0
    started = time.perf_counter()
    for item in items:
        env = load_env(item, out)
        dags = [read_graph(resolve_path(out, p)).dag for p in item["graphs"]]
        skeletons = [Skeleton.model_validate(s) for s in item["skeletons"]]
        result = reconstruct_all(env, dags, skeletons, seed=cfg.seed, max_unlinked=cfg.max_unlinked_traces,
                                 state_variants=variants, variant_budget=cfg.variant_budget)  # fmt: skip
        attempted += result.report.inputs
        kept += len(result.traces)
        writes += sum(map(changes_state, result.traces))
    return {"state_variants": variants, "attempted": attempted, "kept": kept, "state_changing": writes,
            "wall_s": round(time.perf_counter() - started, 2)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="a finished build's run folder")
    parser.add_argument("--limit", type=int, default=40, help="environments measured (first N of the sample)")
    args = parser.parse_args()
    lines = (args.out / "work" / "sample.jsonl").read_text().splitlines()
    items = [json.loads(line) for line in lines[: args.limit]]
    cfg = TDGConfig()
    base = _measure(items, args.out, cfg, 1)
    varied = _measure(items, args.out, cfg, cfg.state_variants)
    ratios = {f"{k}_ratio": round(varied[k] / base[k], 2) for k in ("attempted", "kept", "state_changing", "wall_s")
              if base[k]}  # fmt: skip
    print(json.dumps({"envs": len(items), "baseline": base, "default": varied, **ratios}, indent=1))


if __name__ == "__main__":
    main()
