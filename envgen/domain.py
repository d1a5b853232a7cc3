"""An environment's domain: the words and kinds its own server name, overview and tool descriptions use.

Mock values come from here rather than from a global bank: a blockchain explorer's records are described with
"token transfers" and "contract abi", a memory-forensics tool's with "process list" and "memory image". `Domain` is
a pure function of the toolset's text (`domain_of`); composing text from it is a pure function of the caller's rng.

Kinds (`DOMAIN_KINDS`, a registry keyed by kind) say which families of formats fit: `evm` (0x addresses, chain ids
"1"/"137", ENS names), `solana` (base58 addresses), `crypto` (coin symbols), `sql` (SQL statements), `documents`
(JSON document stores).
"""

from __future__ import annotations

import functools
import random
import re
import zlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import Field

from data.models import StrictModel

__all__ = ["DOMAIN_KINDS", "Domain", "domain_of", "domain_of_schema", "GENERIC_WORDS"]

DOMAIN_KINDS: dict[str, frozenset[str]] = {  # kind -> words of the domain's text that announce it
    "evm": frozenset(
        "ethereum evm erc20 erc721 erc solidity web3 blockscout etherscan defi uniswap polygon arbitrum "
        "optimism ens eth gwei onchain dex sui aptos bnb bsc avalanche".split()
    ),  # fmt: skip
    "solana": frozenset("solana spl lamports phantom jupiter raydium".split()),
    "crypto": frozenset(
        "crypto cryptocurrency cryptocurrencies bitcoin coin coins token tokens blockchain defi "
        "altcoin coingecko coinmarketcap binance exchange staking nft".split()
    ),  # fmt: skip
    "sql": frozenset("sql postgres postgresql mysql sqlite mssql mariadb snowflake bigquery duckdb clickhouse".split()),
    "documents": frozenset("mongodb mongo couchdb firestore dynamodb document documents".split()),
}
GENERIC_WORDS = frozenset(
    """a an the and or of to in on for from by with without at as is are was be been being it its this that these
    those which who whom whose what when where why how all any each every some such no not only own same so than too
    very can will just should would could may might must shall do does did done has have had having get gets got list
    lists listing fetch fetches fetching retrieve retrieves retrieving return returns returned returning provide
    provides provided providing use used uses using via into out up down over under about above after before again
    more most other others one two three first last new old given specified specific optional required default
    value values parameter parameters param params string number integer boolean object array type types field fields
    id ids identifier name names key keys data info information detail details result results response request
    requests tool tools api apis mcp server servers service services client endpoint endpoints function functions call
    calls support supports supported based including include includes within also etc e g i.e eg per if then else
    true false null none format formats option options mode item items entry entries record records set sets
    available current currently latest recent recently specific single multiple many much well allow allows enable
    enables user users your you we our their them they he she his her him himself herself itself using
    search searches query queries find finds create creates update updates delete deletes add adds remove removes
    get_ list_ check checks run runs make makes show shows view views open opens read reads write writes access
    accesses manage manages management perform performs performing help helps helpful useful various specify
    specifies example examples like want need needs must want within between across around simple basic
    https http www com org json yaml text content contents description descriptions summary page pages limit offset
    count total max min maximum minimum size number numbers status statuses since until while during whether both
    either because though although already still even yet instead rather whose thus hence drop execute switch track
    save append enhance navigate parse insert change select send post put patch upload download fetches provides
    retrieves seamless comprehensive powerful advanced detailed optionally securely directly automatically easily
    quickly natural useful different particular certain unlike smart analyzing existing corresponding associated
    related""".split()
)
_NOT_NOUN = re.compile(r"(?:ly|ing|ous|ive|ful|less|able|ible)$|^\w{5,}ed$")
_NAME_NOISE = frozenset("mcp server servers api apis service tool tools toolkit smithery remote client the".split())
_WORD = re.compile(r"[A-Za-z][a-z]{3,}|[A-Z]{2,6}(?![a-z])")


class Domain(StrictModel):
    """What an environment is about, as its own text says it."""

    label: str = Field(description="The server's name without 'MCP', 'server', 'API' (\"Blockscout\").")
    words: tuple[str, ...] = Field(description="Content words of its text, most frequent first (lowercase).")
    phrases: tuple[str, ...] = Field(description="Two-word phrases of its text, most frequent first (lowercase).")
    kinds: frozenset[str] = Field(default=frozenset(), description="Keys of DOMAIN_KINDS its text announces.")

    def word(self, index: int, *, avoid: Iterable[str] = ()) -> str:
        """The `index`-th content word (cycling), skipping `avoid` ("record" when no word is known)."""
        skip = {a.casefold() for a in avoid}
        pool = [w for w in self.words if w not in skip] or ["record"]
        return pool[index % len(pool)]

    def phrase(self, index: int) -> str:
        pool = self.phrases or tuple(f"{self.word(i)} {self.word(i + 1)}" for i in range(3))
        return pool[index % len(pool)]


def _label(name: str) -> str:
    kept = [w for w in re.split(r"[\s_\-/]+", name) if w and w.casefold() not in _NAME_NOISE]
    return " ".join(kept[:3]) or name.strip() or "this service"


def _content(text: str) -> list[str]:
    """Content words of `text` in order: lowercase, four letters or more (acronyms kept), generic words, adverbs,
    adjectives and participles dropped (what is left names things: "token", "transfers", "contract")."""
    spaced = re.sub(r"(?<=[a-z])(?=[A-Z])|_", " ", text)
    return [w.casefold() for w in _WORD.findall(spaced)
            if w.casefold() not in GENERIC_WORDS and not _NOT_NOUN.search(w.casefold())]  # fmt: skip


def _phrases(texts: Sequence[str]) -> list[str]:
    counts: Counter[str] = Counter()
    for text in texts:
        for sentence in re.split(r"[.;:()\n,!?]", text):
            words = re.findall(r"[A-Za-z][A-Za-z0-9]*", sentence)
            names = {w for i, w in enumerate(words) if i and w[:1].isupper()}  # "Victor Hugo" keeps its capitals
            for a, b in zip(words, words[1:], strict=False):
                content = all(len(w) >= 3 and w.casefold() not in GENERIC_WORDS for w in (a, b))
                if (
                    content
                    and a.casefold() != b.casefold()
                    and not _NOT_NOUN.search(b.casefold())
                    and not re.search(r"ly$|^\w{5,}ed$", a.casefold())
                ):
                    kept = (w if w.isupper() or w in names else w.casefold() for w in (a, b))  # "ERC token"
                    counts[" ".join(kept)] += 1
    return [p for p, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]


@functools.lru_cache(maxsize=512)
def _domain(name: str, texts: tuple[str, ...], verbs: frozenset[str] = frozenset()) -> Domain:
    words = Counter()
    order: dict[str, int] = {}
    for text in (name, *texts):
        for w in _content(text):
            words[w] += 1
            order.setdefault(w, len(order))
    ranked = sorted((w for w in words if w not in verbs), key=lambda w: (-words[w], order[w]))
    every = set(words)
    kinds = frozenset(k for k, cues in DOMAIN_KINDS.items() if every & cues)
    return Domain(label=_label(name), words=tuple(ranked[:60]), phrases=tuple(_phrases(texts)[:40]), kinds=kinds)


def domain_of(name: str, description: str = "", tools: Sequence[Any] = ()) -> Domain:
    """The domain of a toolset: its name, overview, and each tool's name, description and parameter descriptions.

    Args:
        name: the server's name ("Blockscout MCP Server").
        description: its overview.
        tools: `ToolSchema`s or raw tool mappings (name, description, parameters / inputSchema).
    """
    texts, verbs = [description], set()
    for tool in tools:
        get = tool.get if isinstance(tool, Mapping) else lambda key, _t=tool: getattr(_t, key, None)
        tool_name = str(get("name") or "")
        texts.append(tool_name.replace("_", " "))
        verbs.update(re.findall(r"^[a-z]+", re.sub(r"(?<=[a-z])(?=[A-Z])", "_", tool_name).casefold())[:1])
        texts.append(str(get("description") or ""))
        params = get("parameters") or get("inputSchema") or {}
        for pname, spec in (params.get("properties") or {}).items() if isinstance(params, Mapping) else ():
            texts.append(str(pname).replace("_", " "))
            if isinstance(spec, Mapping):
                texts.append(str(spec.get("description") or ""))
    return _domain(name, tuple(t for t in texts if t), frozenset(verbs))  # a tool name's verb names no thing


_WORKSPACE = Domain(  # the domain of a value requested with no context at all (no toolset, no description)
    label="the workspace",
    words=("report", "review", "budget", "release", "schedule", "inventory", "account", "project", "invoice", "team"),
    phrases=(
        "release plan",
        "budget review",
        "inventory count",
        "account settings",
        "project timeline",
        "invoice batch",
        "team schedule",
        "quarterly report",
    ),  # fmt: skip
)


def domain_of_schema(field: str, schema: Mapping[str, Any]) -> Domain:
    """The domain of a field requested with nothing else known: its own description's words and phrases, filled up
    with a neutral workspace's (the DB builder and the task reconstruction always pass the toolset's domain)."""
    own = _domain("", (str(schema.get("description") or ""),))
    skip = set(re.findall(r"[a-z]+", field.casefold()))
    words = tuple(w for w in own.words if w not in skip)
    return Domain(label=_WORKSPACE.label, words=words + _WORKSPACE.words, phrases=own.phrases + _WORKSPACE.phrases,
                  kinds=own.kinds)  # fmt: skip


def stable_index(*parts: str) -> int:
    """A seed-independent index fixed by text (which word a field draws first)."""
    return zlib.crc32("\x1f".join(parts).encode("utf-8"))


def pick(rng: random.Random, options: Sequence[str]) -> str:
    return options[rng.randrange(len(options))]
