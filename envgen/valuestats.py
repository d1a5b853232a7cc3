"""Does the mock world fit its domain? Cross-environment value metrics of a built run folder.

Three questions about the values environments hold and tasks pass (issue "A world that fits its domain"):

- **cross-domain filler**: a descriptive value (a description, note, title, any text of three words or more) that
  appears in more than `max_env_share` of the environments comes from a global bank, not from the domain.
- **person name as entity**: a non-person record (a chain, a pool, a database) named like a person ("Garcia
  Network", "Dana Smith"); and a person's name passed where no person is meant (a SQL query "Okafor").
- **stray words**: an argument that is a lone dictionary word the environment's own schemas never use
  (`operation "himself"`, `age_from "choose"`).

Pure functions over `{env_id: db}`, `{env_id: schemas text}` and task records; `world_metrics` reads a run folder.
"""

from __future__ import annotations

import functools
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from data.models import TaskRecord
from envgen.behaviours import PERSON_NOUNS
from envgen.fakes import FREE_TEXT_TOKENS, PERSON_TOKENS, field_tokens
from envgen.naming import singularize

__all__ = [
    "WORLD_TARGETS",
    "descriptive_values",
    "shared_descriptive_values",
    "person_named_entities",
    "is_person_name",
    "stray_words",
    "world_summary",
    "world_metrics",
]

WORLD_TARGETS = {
    "cross_domain_filler_value_count": "<=0",
    "person_name_entity_task_share": "<=0",
    "stray_word_task_share": "<=0.05",
}
_DESCRIPTIVE_TOKENS = FREE_TEXT_TOKENS | {"title", "headline", "subject", "summary", "overview", "caption"}
_PERSON_FIELD_TOKENS = PERSON_TOKENS | PERSON_NOUNS | {"first", "last", "full", "surname", "firstname", "lastname"}
_CODE = re.compile(r"[=\[\]#{}<>|$*@]|\w\.\w")  # code, selectors, file names, hosts: not prose
_IDENTIFIER = re.compile(r"^(?:[\w.+-]+@[\w.-]+|https?://\S+|[/~.][\w./-]*|0x[0-9a-fA-F]+|[\d\s:.TZ+-]+)$")


@functools.lru_cache(maxsize=1)
def _names() -> tuple[frozenset[str], frozenset[str]]:
    """(first names, last names): Faker's en_US lists plus the short tables older builds drew from."""
    from faker.providers.person.en_US import Provider

    first = set(Provider.first_names) | {"Alice", "Bruno", "Chen", "Dana", "Emeka", "Farah", "Goran", "Hana", "Ivan",
                                         "Julia", "Kofi", "Lena"}  # fmt: skip
    last = set(Provider.last_names) | {"Smith", "Okafor", "Li", "Novak", "Garcia", "Haddad", "Ito", "Kowalski",
                                       "Mensah", "Silva", "Berg"}  # fmt: skip
    return frozenset(first), frozenset(last)


@functools.lru_cache(maxsize=1)
def _dictionary() -> frozenset[str]:
    from faker.providers.lorem.en_US import Provider

    return frozenset(w.casefold() for w in Provider.word_list)


def _leaves(value: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            yield from _leaves(v, str(k))
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item, key)
    else:
        yield key, value


def _descriptive(key: str, value: Any) -> bool:
    if not isinstance(value, str) or _IDENTIFIER.match(value.strip()) or len(value) > 300 or " " not in value.strip():
        return False
    if _CODE.search(value) or set(field_tokens(key)) & _PERSON_FIELD_TOKENS:
        return False  # a command, a selector, a host, a file name; a person's name
    words = re.findall(r"[^\W\d_]{2,}", value)
    return bool(set(field_tokens(key)) & _DESCRIPTIVE_TOKENS) and len(words) >= 2 or len(words) >= 3


def descriptive_values(db: Mapping[str, Any]) -> set[str]:
    """The descriptive strings of one mock DB: free-text fields (description, note, title) and any text of three
    words or more that is not an e-mail, URL, path, hash or date."""
    return {str(v).strip() for k, v in _leaves(db) if _descriptive(k, v)}


def shared_descriptive_values(dbs: Mapping[str, Mapping[str, Any]], max_env_share: float = 0.01) -> dict[str, int]:
    """Descriptive values held by more environments than `max_env_share` allows (at least two): value -> envs."""
    counts = Counter(v for db in dbs.values() for v in descriptive_values(db))
    limit = max(1, int(max_env_share * len(dbs)))
    return {v: n for v, n in sorted(counts.items()) if n > limit}


def is_person_name(value: str) -> bool:
    """A person's name, or a "Surname Entity" made of one: "Dana Smith", "Garcia Network", "Kowalski Database"."""
    words = value.split()
    if not 2 <= len(words) <= 3 or not all(w[:1].isupper() for w in words):
        return False
    first, last = _names()
    return words[0] in first | last and (words[1] in last or len(words) == 2)


def _person_field(collection: str, field: str) -> bool:
    tokens = set(field_tokens(field)) | {singularize(collection)} | set(field_tokens(singularize(collection)))
    return bool(tokens & _PERSON_FIELD_TOKENS)


def person_named_entities(db: Mapping[str, Any]) -> set[str]:
    """Names of non-person records that read as a person's name (the name field of a chain, a pool, a note)."""
    found = set()
    for collection, records in db.items():
        if not isinstance(records, Mapping):
            continue
        for record in records.values():
            if not isinstance(record, Mapping):
                continue
            for field, value in record.items():
                named = "name" in field_tokens(field) or field in ("title", "label")
                if named and isinstance(value, str) and not _person_field(collection, field) and is_person_name(value):
                    found.add(value)
    return found


def _schema_words(schemas: Sequence[Mapping[str, Any]]) -> frozenset[str]:
    return frozenset(w.casefold() for w in re.findall(r"[A-Za-z]+", json.dumps(list(schemas), ensure_ascii=False)))


def stray_words(record: TaskRecord, vocabulary: frozenset[str]) -> list[str]:
    """Arguments that are one lowercase dictionary word the environment's schemas never use ("himself")."""
    dictionary = _dictionary()
    return [f"{call.name}.{key}={value!r}" for stage in record.trace.stages for call in stage.calls
            for key, value in _leaves(call.arguments)
            if isinstance(value, str) and value in dictionary and value not in vocabulary]  # fmt: skip


def _person_arguments(record: TaskRecord) -> list[str]:
    """String arguments of non-person parameters that carry a surname or a person's full name ("Okafor")."""
    _, last = _names()
    found = []
    for stage in record.trace.stages:
        for call in stage.calls:
            if set(field_tokens(call.name)) & (_PERSON_FIELD_TOKENS | {"authors", "people", "users", "members"}):
                continue  # a search of authors or users takes a person's name
            for key, value in _leaves(call.arguments):
                if not isinstance(value, str) or set(field_tokens(key)) & _PERSON_FIELD_TOKENS:
                    continue
                if is_person_name(value) or value.strip() in last:
                    found.append(f"{call.name}.{key}={value!r}")
    return found


def _shows(record: TaskRecord, values: set[str]) -> bool:
    return any(isinstance(v, str) and v.strip() in values for stage in record.trace.stages for call in stage.calls
               for _, v in (*_leaves(call.arguments), *_leaves(call.output)))  # fmt: skip


def _share(count: int, total: int) -> float:
    return round(count / total, 4) if total else 0.0


def world_summary(
    dbs: Mapping[str, Mapping[str, Any]],
    schemas: Mapping[str, Sequence[Mapping[str, Any]]],
    records: Sequence[TaskRecord],
    *,
    max_env_share: float = 0.01,
) -> dict[str, Any]:
    """The metrics of the module docstring over environments (`dbs`, `schemas`) and their tasks."""
    shared = shared_descriptive_values(dbs, max_env_share)
    person = {env: person_named_entities(db) for env, db in dbs.items()}
    env_shared = {env: descriptive_values(db) & set(shared) for env, db in dbs.items()}
    vocab = {env: _schema_words(s) for env, s in schemas.items()}
    tasks_with: dict[str, int] = defaultdict(int)
    for record in records:
        tasks_with["filler"] += _shows(record, env_shared.get(record.env_id, set()))
        tasks_with["person_entity"] += _shows(record, person.get(record.env_id, set()))
        tasks_with["person_argument"] += bool(_person_arguments(record))
        tasks_with["stray"] += bool(stray_words(record, vocab.get(record.env_id, frozenset())))
    n, envs = len(records), len(dbs)
    return {
        "world_envs": envs,
        "world_tasks": n,
        "cross_domain_filler_value_count": len(shared),
        "cross_domain_filler_env_share": _share(sum(bool(v) for v in env_shared.values()), envs),
        "cross_domain_filler_task_share": _share(tasks_with["filler"], n),
        "cross_domain_filler_top": dict(sorted(shared.items(), key=lambda kv: -kv[1])[:10]),
        "person_name_entity_env_share": _share(sum(bool(v) for v in person.values()), envs),
        "person_name_entity_task_share": _share(tasks_with["person_entity"], n),
        "person_name_argument_task_share": _share(tasks_with["person_argument"], n),
        "stray_word_task_share": _share(tasks_with["stray"], n),
    }


def world_metrics(out: Path, records: Sequence[TaskRecord] | None = None) -> dict[str, Any]:
    """`world_summary` of a `gust build` run folder (`OUT/envs/*/db.json`, `schemas.json`, `OUT/gust`)."""
    out = Path(out)
    dbs, schemas = {}, {}
    for env_dir in sorted(p for p in (out / "envs").iterdir() if (p / "db.json").is_file()):
        dbs[env_dir.name] = json.loads((env_dir / "db.json").read_text(encoding="utf-8"))
        if (env_dir / "schemas.json").is_file():
            schemas[env_dir.name] = json.loads((env_dir / "schemas.json").read_text(encoding="utf-8"))
    if records is None:
        from data.gust import read_gust

        records = read_gust(out / "gust")
    return world_summary(dbs, schemas, records)
