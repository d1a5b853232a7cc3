"""What a tool promises, read from its description first and its name second, and whether its behaviour keeps it.

`promise(tool)` finds the leading verb of the description's first sentence (filler such as "This tool allows
you to" skipped; a word after an article or before "of" is a noun, not a verb) and, failing that, the name's verb,
and maps it to an effect through the registry `EFFECTS`:
    read     get / list / search / fetch ...: returns what exists, never changes state
    write    create / delete / set / send / execute / transfer ...: changes state (records, the world, a UI)
    compute  calculate / encode / hash / generate ...: a pure function of its arguments
    unknown  no verb found
`contradiction(promise, family)` says, with a reason, when a behaviour family breaks that promise: a write built
as a lookup/search/get (the change never happens), a read built as a writing family or the log-only fallback (the
state changes, or nothing is returned), a computation built as a writing family. `check_call` is the dynamic
counterpart: one call's DB diff and output against the promise. `fidelity_summary` aggregates manifests.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from data.models import StrictModel, ToolSchema
from gustforge.registry import Registry

__all__ = [
    "COMPUTED_FAMILIES",
    "EFFECTS",
    "READ_ONLY_FAMILIES",
    "STATE_FAMILIES",
    "Effect",
    "Promise",
    "promise",
    "contradiction",
    "contradictions",
    "check_call",
    "fidelity_summary",
    "run_fidelity",
]

Effect = Literal["read", "write", "compute", "unknown"]

EFFECTS: Registry[Effect] = Registry("verb effect")
_LEXICON: dict[Effect, str] = {
    "read": "get retrieve fetch list search find lookup look query show display view read browse obtain check "
    "inspect describe explore discover scan monitor watch track see download peek count access return provide give",
    "compute": "calculate compute convert encode decode hash encrypt decrypt generate validate verify analyze "
    "analyse parse format translate summarize summarise explain estimate evaluate compare predict simulate solve "
    "render transform extract tokenize classify detect recommend suggest diff measure normalize sanitize "
    "compress decompress truncate",
    "write": "create add insert register post submit upload save store write record log place book reserve "
    "schedule open update set edit modify change rename move assign unassign patch mark toggle enable disable "
    "cancel approve reject complete close archive confirm pay renew extend adjust activate deactivate suspend "
    "resume pause publish unpublish delete remove destroy erase purge drop unregister discard revoke clear reset "
    "send notify email reply broadcast tweet transfer buy sell purchase trade swap stake unstake mint burn deploy "
    "install uninstall execute run start stop kill terminate launch restart trigger invoke connect disconnect "
    "login logout authenticate click type press scroll hover drag navigate fill tap swipe apply import commit "
    "push merge fork clone lock unlock follow unfollow like subscribe unsubscribe invite join leave ban kick grant "
    "sync backup restore rollback undo redo increment decrement deposit withdraw charge refund vote upvote "
    "comment annotate attach detach link unlink share play replace append rotate resize crop upsert enqueue "
    "dequeue spawn allocate release shutdown reboot wipe overwrite",
}
for _effect, _words in _LEXICON.items():
    for _word in dict.fromkeys(_words.split()):
        EFFECTS.add(_word, _effect)

READ_ONLY_FAMILIES = frozenset({"lookup", "get_by_id", "search", "math", "conversion", "text"})
STATE_FAMILIES = frozenset({"crud", "status_transition", "transfer", "payment", "messaging", "scheduling", "log_only"})
COMPUTED_FAMILIES = frozenset({"math", "conversion", "text"})  # strict matchers: the operation, not a verb, decides

_FILLER = re.compile(
    r"^\s*(?:\[[^\]]*\]\s*|\([^)]*\)\s*)*(?:(?:this|the|a|an)\s+)?(?:tool|function|endpoint|method|api|command|"
    r"mcp\s+tool)?\s*(?:that|which|to|will|can|is\s+used\s+to|is\s+for|for|lets\s+you|allows\s+(?:you\s+)?to|"
    r"enables\s+(?:you\s+)?to|helps\s+(?:you\s+)?|used\s+to|use\s+this\s+(?:tool\s+)?to)?\s*",
    re.IGNORECASE,
)
_DETERMINERS = {"a", "an", "the", "this", "that", "its", "your", "their", "each", "every", "all", "any", "some",
                "my", "our", "his", "her", "of", "for", "in", "on", "by", "with", "to"}  # fmt: skip
_NOUN_FOLLOWERS = {"of", "is", "are", "was"}
_SKIP = {"allow", "allows", "help", "helps", "let",
         "lets", "use", "uses", "using", "enable", "enables", "tool", "please", "will", "can", "may", "must",
         "should", "and", "or", "then", "also", "optionally", "simply", "quickly", "easily"}  # fmt: skip
_MAX_WORDS = 3  # the verb leads the sentence ("Deletes ...", "Get ..."); deeper words describe, not promise


class Promise(StrictModel):
    """What a tool says it does."""

    effect: Effect
    verb: str | None = None
    source: Literal["description", "name", "none"] = "none"

    @property
    def reason(self) -> str:
        if self.verb is None:
            return "no verb in description or name"
        return f"{self.source} verb '{self.verb}' promises a {self.effect}"


def _stem(word: str) -> str | None:
    """The lexicon verb a word inflects (deletes -> delete, searching -> search), else None; participles ("items
    stored in") describe a noun and promise nothing."""
    word = word.lower()
    candidates = [word]
    if word.endswith("ies"):
        candidates.append(word[:-3] + "y")
    if word.endswith("es"):
        candidates.append(word[:-2])
    if word.endswith("s"):
        candidates.append(word[:-1])
    if word.endswith("ing"):
        candidates += [word[:-3], word[:-3] + "e", word[:-4]]
    return next((c for c in candidates if c in EFFECTS), None)


def _description_verb(text: str) -> str | None:
    sentence = re.split(r"(?<=[.!?])\s|\n", text.strip(), maxsplit=1)[0]
    sentence = _FILLER.sub("", sentence, count=1)
    words = re.findall(r"[A-Za-z][A-Za-z\-]*", sentence)
    for index, word in enumerate(words[:_MAX_WORDS]):
        low = word.lower()
        if low in _SKIP:
            continue
        verb = _stem(low)
        if verb is None:
            continue
        before = words[index - 1].lower() if index else ""
        after = words[index + 1].lower() if index + 1 < len(words) else ""
        if before in _DETERMINERS or after in _NOUN_FOLLOWERS:
            continue  # "the list of", "a set of": a noun
        return _purpose(verb, sentence)
    return None


_RUNNERS = {"run", "execute", "invoke", "trigger", "launch"}


def _purpose(verb: str, sentence: str) -> str:
    """ "Run the PsList plugin to list processes": a runner verb promises what it runs *to* do, when that reads."""
    if verb not in _RUNNERS:
        return verb
    match = re.search(r"\bto\s+([a-z]+)", sentence.lower())
    aim = _stem(match.group(1)) if match else None
    return aim if aim is not None and EFFECTS.get(aim) in ("read", "compute") else verb


def _name_verb(name: str) -> str | None:
    tokens = [t for t in re.split(r"[_\-]", name.lower()) if t]
    for token in tokens[:1] + tokens[1:]:
        verb = _stem(token)
        if verb is not None:
            return verb
    return None


def promise(tool: ToolSchema) -> Promise:
    """The tool's promised effect: the description's leading verb, else the name's verb.

    Example:
        >>> from data.models import ToolSchema
        >>> promise(ToolSchema(name="drop_database", description="Deletes the database and all its tables.")).effect
        'write'
    """
    verb = _description_verb(tool.description or "")
    if verb is not None:
        return Promise(effect=EFFECTS.get(verb), verb=verb, source="description")
    verb = _name_verb(tool.name)
    if verb is not None:
        return Promise(effect=EFFECTS.get(verb), verb=verb, source="name")
    return Promise(effect="unknown")


def contradiction(said: Promise, family: str) -> str | None:
    """Why `family` breaks the promise, or None when it keeps it (or the promise is unknown / a computation)."""
    if said.effect == "write" and family in READ_ONLY_FAMILIES and family not in COMPUTED_FAMILIES:
        return f"{said.reason} but is built as '{family}' (the change never happens)"
    if said.effect == "read" and family in STATE_FAMILIES:
        what = "only logs the call and returns nothing" if family == "log_only" else "changes state"
        return f"{said.reason} but is built as '{family}' ({what})"
    if said.effect == "compute" and family in STATE_FAMILIES and family != "log_only":
        return f"{said.reason} but is built as '{family}' (changes state)"
    return None


def contradictions(tools: Iterable[ToolSchema], families: Mapping[str, str]) -> dict[str, str]:
    """tool -> reason, for every tool whose family (`families[tool]`) breaks its promise."""
    out: dict[str, str] = {}
    for tool in tools:
        family = families.get(tool.name)
        why = contradiction(promise(tool), family) if family else None
        if why is not None:
            out[tool.name] = why
    return out


class CallCheck(StrictModel):
    ok: bool
    reason: str = Field(default="", description="Why the call broke its promise (empty when it kept it).")


def check_call(said: Promise, before: Mapping[str, Any], after: Mapping[str, Any], out: Any) -> CallCheck:
    """One successful call against its promise: a read leaves the DB equal, a write changes it."""
    if not isinstance(out, dict) or out.get("status") != "success":
        return CallCheck(ok=True, reason="")  # rejected calls are the validation tests' business
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    if said.effect == "read" and changed:
        return CallCheck(ok=False, reason=f"{said.reason} but the call changed {', '.join(changed)}")
    if said.effect == "write" and not changed:
        return CallCheck(ok=False, reason=f"{said.reason} but the call left the DB unchanged")
    return CallCheck(ok=True)


def fidelity_summary(manifests: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Corpus figures from env manifests: contradictions (count, share of tools) and family-swap kill rates."""
    tools = contradicted = log_only = envs = swap_envs = swap_full = 0
    killed = total = 0
    for manifest in manifests:
        envs += 1
        tools += len(manifest.get("behaviours") or {})
        contradicted += len(manifest.get("contradictions") or {})
        log_only += len(manifest.get("log_only_tools") or [])
        swap = manifest.get("family_swap") or {}
        if swap.get("total"):
            swap_envs += 1
            killed += swap.get("killed", 0)
            total += swap["total"]
            swap_full += swap.get("killed", 0) == swap["total"]
    return {
        "envs": envs,
        "tools": tools,
        "contradictions": contradicted,
        "contradiction_share": round(contradicted / tools, 4) if tools else 0.0,
        "log_only_tools": log_only,
        "family_swap_killed": killed,
        "family_swap_total": total,
        "family_swap_score": round(killed / total, 4) if total else None,
        "envs_killing_every_family_swap": swap_full,
        "envs_with_family_swap": swap_envs,
    }


def run_fidelity(envs_dir: Path) -> dict[str, Any]:
    """`fidelity_summary` over a run folder's `envs/*/manifest.json`, keys prefixed `env_` (for `gust quality`)."""
    manifests = []
    for path in sorted(Path(envs_dir).glob("*/manifest.json")):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        schemas = path.with_name("schemas.json")
        if "contradictions" not in manifest and schemas.is_file():  # built before the manifest recorded them
            tools = [ToolSchema.model_validate(t) for t in json.loads(schemas.read_text(encoding="utf-8"))]
            manifest["contradictions"] = contradictions(tools, manifest.get("behaviours") or {})
        manifests.append(manifest)
    return {f"env_{key}": value for key, value in fidelity_summary(manifests).items() if value is not None}
