"""`gust deploy --serve` runs each scheduled build by cloudpickling the flow object into a spawned process; its
parameters must still validate there (issue 25: every served run failed with `Build_FlowModel is not fully
defined`, because string annotations of a function pickled by value cannot be resolved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

_LOAD = """
import sys, cloudpickle
from gustforge.config import BuildConfig
flow = cloudpickle.loads(open(sys.argv[1], "rb").read())
args = {"cfg": BuildConfig().model_dump(mode="json")} if flow.name == "gust-build" else {
    "stage": "export", "source": "/tmp", "cfg": BuildConfig().model_dump(mode="json")}
print(sorted(flow.validate_parameters(args)))
"""


@pytest.mark.parametrize("name", ["build_flow", "stage_flow"])
def test_pickled_flow_validates_its_parameters_in_a_fresh_process(tmp_path: Path, name: str) -> None:
    import cloudpickle

    import flows.build

    pickled = tmp_path / "flow.pkl"
    pickled.write_bytes(cloudpickle.dumps(getattr(flows.build, name)))
    done = subprocess.run([sys.executable, "-c", _LOAD, str(pickled)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'cfg'" in done.stdout
