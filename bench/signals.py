"""Signal-exit benchmark: how long `gust build` takes to exit after Ctrl-C / SIGTERM mid-run, and how long after
`kill -9` its embedded Prefect server (and every other process it started) stays alive; optionally with a busy
loop burning each core (the load under which the issue-25 suite failed).

Run: `.venv/bin/python bench/signals.py [--repeat 3] [--busy]`; prints one JSON object. The tests only check that
the exit happens and leaves nothing behind (`tests/flows/test_cli_interrupt.py`); the seconds live here.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_MARKER = "GUST_BENCH_SIGNAL_MARKER"


def _busy() -> None:
    while True:
        pass


def _alive(marker: str) -> int:
    needle = f"{_MARKER}={marker}".encode() + b"\0"
    count = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                count += needle in (proc / "environ").read_bytes() + b"\0"
            except OSError:
                continue
    return count


def one_run(how: str, tmp: Path) -> dict[str, float]:
    """Start a build, wait until envgen is done, send the signal; seconds to exit and until nothing is alive."""
    marker = f"{tmp}/{how}-{time.monotonic_ns()}"
    out = Path(marker) / "out"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}, "PYTHONPATH": str(ROOT),
           "PREFECT_HOME": str(tmp / "prefect-home"), _MARKER: marker}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "flows.cli", "build", "--out", str(out)], env=env, cwd=tmp,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    while not (out / "work" / "envgen.jsonl").is_file():
        if proc.poll() is not None:
            raise SystemExit(f"the build exited with {proc.returncode} before envgen finished")
        time.sleep(0.1)
    sent = time.perf_counter()
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal({"sigterm": signal.SIGTERM, "sigkill": signal.SIGKILL}[how])
    proc.wait()
    exited = time.perf_counter() - sent
    while _alive(marker):
        time.sleep(0.05)
    return {"exit_s": round(exited, 2), "all_gone_s": round(time.perf_counter() - sent, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="a busy loop on each core while measuring")
    args = parser.parse_args()
    n_busy = (os.cpu_count() or 1) if args.busy else 0
    burners = [multiprocessing.Process(target=_busy, daemon=True) for _ in range(n_busy)]
    for burner in burners:
        burner.start()
    results: dict[str, Any] = {"busy_loops": len(burners), "load_before": os.getloadavg()[0]}
    try:
        with tempfile.TemporaryDirectory(prefix="gust-signals-") as tmp:
            for how in ("ctrl-c", "sigterm", "sigkill"):
                runs = [one_run(how, Path(tmp)) for _ in range(args.repeat)]
                results[how] = {key: {"median": round(statistics.median(r[key] for r in runs), 2),
                                      "max": max(r[key] for r in runs)} for key in runs[0]}  # fmt: skip
    finally:
        for burner in burners:
            burner.terminate()
    results["load_after"] = os.getloadavg()[0]
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
