"""A published GUST folder stands alone: copied elsewhere with no run folder, it loads with `datasets`, every row
carries its tool schemas, and one task replays through its environment restored with `gust env pull`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from data.gust import read_gust
from envgen.stage import ingest_inputs
from gustforge.accounting import finish_stage, write_ingest_report
from gustforge.config import load_config
from tasks.stage_table import STAGE_ORDER, STAGES

REPO = Path(__file__).resolve().parents[2]


def build_direct(inputs: list[Path], out: Path) -> Path:
    """Run every stage in this process through the stage functions (no Prefect): the same functions the flow runs."""
    cfg = load_config(None, ["tdg.n_graphs=1"], out=out, inputs=[str(p) for p in inputs])
    ingest = ingest_inputs(inputs, cfg)
    write_ingest_report(out, ingest)
    items = list(ingest.toolsets)
    for stage in STAGE_ORDER:
        spec = STAGES.get(stage)
        items = finish_stage(stage, [spec.run(items, cfg, out)], out, 1.0, spec.policy).items
    return out


def test_exported_folder_replays_a_task_with_no_run_folder(tmp_path: Path) -> None:
    from datasets import load_dataset

    from data.models import GoldenTrace
    from envgen.runtime import Environment
    from flows.cli import app
    from tdg.verify import replay_trace
    from tdg.verify_config import VerifyConfig

    raw = REPO / "data" / "samples" / "raw" / "openai_tools"
    out = build_direct([raw / "weather.json", raw / "inventory.json"], tmp_path / "run" / "out")
    records = read_gust(out / "gust")
    train = read_gust(out / "gust", split="train")  # the rest: environments held out for the test split
    assert records and train, "the direct build produced no rows"
    staged = tmp_path / "staged"
    result = CliRunner().invoke(app, ["export", "--from", str(out / "gust"), "--dry-run", str(staged)])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)["files"]
    assert {f"envs/{r.env_id}/tools.py" for r in records} <= set(listed)

    elsewhere = tmp_path / "elsewhere" / "gust"
    shutil.copytree(staged, elsewhere)
    shutil.rmtree(tmp_path / "run")  # nothing of the run folder is left
    assert str(tmp_path / "run") not in "".join(p.read_text(errors="replace") for p in elsewhere.rglob("*.json"))

    rows = load_dataset(str(elsewhere), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert len(rows) == len(train)
    for row in rows:
        schemas = json.loads(row["tool_schemas"])
        assert [s["function"]["name"] for s in schemas] == row["tools"]

    row = rows[0]
    pulled = tmp_path / "pulled"
    result = CliRunner().invoke(app, ["env", "pull", str(elsewhere), row["env_id"], "--to", str(pulled)])
    assert result.exit_code == 0, result.output
    env = Environment.load(pulled / row["env_id"])
    replay = replay_trace(GoldenTrace.model_validate_json(row["golden_trace"]), env,
                          session_seed=VerifyConfig().session_seed)  # fmt: skip
    assert replay.ok, replay.mismatches
    card = (elsewhere / "README.md").read_text()
    for section in ("## Sources and licenses", "## Loading", "## Running an environment", "## Limitations",
                    "## Citation"):  # fmt: skip
        assert section in card
    # the sources behind the rows (whichever of the two inputs yielded tasks) carry the sample's license
    assert "license: apache-2.0" in card
    assert any(f"| `{name}` | openai_tools | apache-2.0 |" in card for name in ("weather.json", "inventory.json"))
