"""Realistic, typed, seeded values by field name and format — the one source of mock-DB and argument values.

A value is chosen from what the field's name (``customer_email``, ``cnpj``, ``check_in``, ``host``) or JSON-schema
``format`` says it holds: person and company names, e-mails, cities, street addresses, dates, hostnames, ports,
tickers, Brazilian CNPJ/CPF numbers, IBANs, ... Faker (pinned in constraints.txt) supplies the locale data. Free
text (notes, descriptions, titles), topics, categories and company names are composed from the environment's own
domain (`envgen.domain`: its name, overview and tool descriptions), never drawn from a global sentence bank; the
domain's kinds pick the format of an "address" (0x-hex on an EVM chain, a street elsewhere), a "symbol" or a query
(`FIELD_KINDS`, one generator per field kind). Every value is a pure function of the caller's `random.Random`: a
Faker instance is re-seeded from it per value, and no relative ("today") date is used, so builds stay reproducible
offline.

Never produced: "<codename> <field name>" fillers ("summit file key"), "#N" counters, "recently added" boilerplate.
"""

from __future__ import annotations

import functools
import random
import re
import threading
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from envgen.domain import Domain, domain_of_schema, stable_index

__all__ = [
    "CITIES",
    "ENS_NAMES",
    "FIELD_KINDS",
    "domain_text",
    "entity_name",
    "field_kind",
    "FREE_TEXT_TOKENS",
    "PERSON_TOKENS",
    "field_tokens",
    "note_text",
    "plain_value",
    "plain_words",
    "schema_examples",
    "title_text",
    "typed_value",
]

Maker = Callable[["_Ctx"], Any]

PERSON_TOKENS = frozenset(
    "author owner customer patient guest holder assignee recipient contact user employee passenger driver sender "
    "person attendee member buyer seller manager doctor client tenant traveler traveller student teacher "
    "reviewer requester reporter approver organizer participant speaker artist".split()
)
FREE_TEXT_TOKENS = frozenset(
    "note notes comment comments message description body content text reason details summary feedback bio "
    "memo remark remarks instructions review".split()
)

_TICKERS = ("AAPL", "MSFT", "NVDA", "TSLA", "AMZN", "GOOGL", "META", "JPM", "KO", "PETR4", "VALE3", "SAP", "TM")
_LANGUAGES = ("en", "es", "fr", "de", "pt", "ja")
_STATUS = ("active", "pending", "confirmed", "completed", "open")
_DIRS = ("/home/dana/projects/site", "/srv/data/exports", "/var/log/app", "/Users/maria/Documents/reports",
         "/opt/app/config", "/home/dev/notes", "/data/uploads/2025")  # fmt: skip
_FILES = ("report.pdf", "notes.txt", "config.yaml", "sales_q3.csv", "main.py", "README.md", "invoice_0423.pdf",
          "photo_0012.jpg", "backup.tar.gz", "server.log", "index.html", "schema.sql")  # fmt: skip
_COMMANDS = ("ls -la", "git status", "npm test", "df -h", "python main.py", "pytest -q", "docker ps", "make build",
             "tail -n 50 server.log", "du -sh .")  # fmt: skip
_PATTERNS = ("*.py", "*.log", "error", "def main", "*.csv", "import requests", "FIXME", "timeout")
_STORES = ("customers", "orders", "analytics", "inventory", "billing", "users", "events", "products", "sessions",
           "payments", "reports", "audit_logs")  # fmt: skip
_REGIONS = ("Northeast", "Pacific Northwest", "Midwest", "Western Europe", "Southeast Asia", "East Africa", "Andes")
_CRYPTO = ("BTC", "ETH", "SOL", "ADA", "DOT", "LTC")
_SELECTORS = ("#submit-button", ".nav-link", "button[type=submit]", "#search-input", "a.product-title",
              "div.modal-footer > button", "input[name=email]", "#login-form")  # fmt: skip
_EXPRESSIONS = ("2 * (3 + 4)", "sqrt(144) + 7", "15 / 4", "3 ** 4 - 10", "(120 - 45) * 0.2", "sin(0.5) + 1")
_PHRASES = ("hello world", "order-2025-0413", "user@42",
            "Release v2.4 is ready")  # fmt: skip
_NETWORKS = ("ethereum", "solana", "polygon", "arbitrum", "base", "bsc")
_PACKAGES = ("requests", "numpy", "lodash", "express", "laravel/framework", "react", "pandas", "guzzlehttp/guzzle")
_CHANNELS = ("general", "alerts", "team-updates", "support", "release-notes", "random")
_CRONS = ("0 9 * * 1-5", "*/15 * * * *", "0 0 1 * *", "30 18 * * 5", "0 */6 * * *")
CITIES = (
    "Lisbon", "Toronto", "Osaka", "Nairobi", "Denver", "Krakow", "Melbourne", "Bogota", "Oslo", "Austin",
    "Berlin", "Lima", "Seoul", "Dublin", "Perth", "Sao Paulo", "Cape Town", "Vancouver", "Lyon", "Porto",
)  # fmt: skip


_PER_THREAD = threading.local()
_IMPORTING = threading.Lock()  # serializes the first imports of Faker's modules (not values: those are per thread)


def _faker(locale: str) -> Any:
    """This thread's Faker for `locale`: callers re-seed it per value, so threads (envgen builds several toolsets
    at once) must not share one, or a value would depend on another thread's timing."""
    fakers = _PER_THREAD.__dict__.setdefault("fakers", {})
    if locale not in fakers:
        with _IMPORTING:  # threads importing Faker's modules at once deadlock on the import locks (seen in a build)
            from faker import Faker  # imported on first use: a ~0.4 s import

            fakers[locale] = Faker(locale)  # imports the locale's provider modules
    return fakers[locale]


class _Ctx:
    """One value request: the field's name tokens, its domain and a Faker re-seeded from the caller's rng."""

    def __init__(self, ordered: tuple[str, ...], rng: random.Random, index: int, domain: Domain) -> None:
        self.ordered, self.tokens, self.rng, self.index, self.domain = ordered, frozenset(ordered), rng, index, domain
        self._seed = rng.getrandbits(32)

    def fake(self, locale: str = "en_US") -> Any:
        faker = _faker(locale)
        faker.seed_instance(self._seed)
        return faker

    def date(self, start_year: int = 2025, years: int = 1) -> str:
        return f"{self.rng.randint(start_year, start_year + years - 1)}-{self.rng.randint(1, 12):02d}-" \
               f"{self.rng.randint(1, 28):02d}"  # fmt: skip


def field_tokens(name: str) -> list[str]:
    """'customerEmail' -> ['customer', 'email'];  'check_in_date' -> ['check', 'in', 'date']."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name)
    return [t for t in re.split(r"[\W_]+", spaced.lower()) if t]


# Frames of composed text; the words come from the environment's own domain (`envgen.domain`), never a bank.
_TEXT_FRAMES: dict[str, tuple[str, ...]] = {
    "description": ("{Noun} covering {p1} and {p2}.", "{P1} for {label}, with {p2}.", "{P1}, {p2} and {p3}.",
                    "Tracks {p1} and {p2} in {label}.", "{P1} of this {noun}, linked to {p2}."),
    "note": ("Check the {p1} before the {p2}.", "Follow up on {p1} in {label}.", "Compare {p1} with {p2}.",
             "Needs a second look at {p1}.", "Keep {p1} in sync with {p2}."),
    "title": ("{P1} review", "{P1} and {p2}", "{Label} {p1}", "{P1} check", "Weekly {p1} report"),
    "rationale": ("Use {p1} for {p2}.", "Keep {p1} until {p2} is checked.", "Prefer {p1} over {p2} here.",
                  "Base the {p1} on {p2}."),
    "question": ("Which {p1} fits {p2}?", "How is {p1} computed?", "What changed in {p1}?",
                 "Is {p1} linked to {p2}?"),
}  # fmt: skip
_DESCRIBING = frozenset({"description", "details", "summary", "bio", "content", "body", "overview", "about"})


def domain_text(kind: str, domain: Domain, rng: random.Random, *, noun: str = "record") -> str:
    """Text of `kind` (description, note, title, rationale, question) composed from `domain`'s own phrases.

    The draws mix the caller's rng with the domain's own text, so two environments built with one seed from similar
    phrase lists do not compose the same sentence (no value shared across environments)."""
    rng = random.Random(rng.getrandbits(32) ^ stable_index(domain.label, *domain.phrases[:3]))
    frame = _TEXT_FRAMES[kind][rng.randrange(len(_TEXT_FRAMES[kind]))]
    picks = rng.sample(range(max(3, len(domain.phrases))), 3)
    p1, p2, p3 = (domain.phrase(i) for i in picks)
    noun = noun.replace("_", " ")
    return frame.format(p1=p1, p2=p2, p3=p3, P1=p1[:1].upper() + p1[1:], label=domain.label, Label=domain.label,
                        noun=noun, Noun=noun[:1].upper() + noun[1:])  # fmt: skip


def note_text(rng: random.Random, tokens: frozenset[str] = frozenset(), domain: Domain | None = None) -> str:
    """A free-text note or description of the domain (descriptions describe a thing, notes ask for something)."""
    domain = domain or domain_of_schema(" ".join(sorted(tokens)) or "note", {})
    return domain_text("description" if tokens & _DESCRIBING else "note", domain, rng)


def title_text(rng: random.Random, domain: Domain | None = None) -> str:
    return domain_text("title", domain or domain_of_schema("title", {}), rng)


def entity_name(domain: Domain, noun: str, index: int) -> str:
    """The name of the `index`-th non-person record of `noun`: a domain word and the noun ("Transfer Pool"), never
    a person's name ("Garcia Pool")."""
    head = noun.replace("_", " ").split()[-1] if noun.strip("_ ") else "record"
    word = domain.word(stable_index(domain.label, noun) + index - 1, avoid=(head, *noun.split("_"), *_person_names()))
    return f"{word.title()} {head.title()}" if word.casefold() != head.casefold() else word.title()


@functools.lru_cache(maxsize=1)
def _person_names() -> frozenset[str]:
    with _IMPORTING:
        from faker.providers.person.en_US import Provider

    return frozenset(n.casefold() for n in (*Provider.first_names, *Provider.last_names))


def _hex(c: _Ctx, digits: int) -> str:
    return "0x" + "".join(c.rng.choice("0123456789abcdef") for _ in range(digits))


def _base58(c: _Ctx, length: int = 44) -> str:
    return "".join(c.rng.choice("123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz") for _ in range(length))


def _sql(c: _Ctx) -> str:
    table = re.sub(r"\W+", "_", c.domain.word(c.rng.randrange(8))).strip("_") or "records"
    frame = ("SELECT * FROM {t} LIMIT {n}", "SELECT COUNT(*) FROM {t}",
             "SELECT id, name FROM {t} ORDER BY id LIMIT {n}")  # fmt: skip
    return c.rng.choice(frame).format(t=table if table.endswith("s") else f"{table}s", n=c.rng.choice((5, 10, 20)))


_CHAIN_IDS = ("1", "137", "42161", "10", "8453", "56")  # Ethereum, Polygon, Arbitrum One, Optimism, Base, BNB
ENS_NAMES = ("vitalik.eth", "nick.eth", "uniswap.eth", "ens.eth", "aave.eth", "brantly.eth")
_CRYPTO_SYMBOLS = ("ETH", "USDC", "WBTC", "UNI", "LINK", "DAI", "SOL", "BTC")
_COMPANY_SUFFIXES = ("Labs", "Systems", "Group", "Partners", "Works", "Analytics")


def _in(*kinds: str) -> Callable[[_Ctx], bool]:
    return lambda c: bool(c.domain.kinds & set(kinds))


def _address_field(c: _Ctx) -> bool:
    named = bool(c.tokens & {"address", "wallet", "contract", "owner", "holder", "recipient", "sender", "spender"})
    return (named or c.tokens in ({"from"}, {"to"})) and not c.tokens & {"name", "email", "ip", "street", "postal"}


# Field kinds only a domain can tell (an "address" of a chain is not a street): (kind, test); the first match wins.
_DOMAIN_KIND_TESTS: tuple[tuple[str, Callable[[_Ctx], bool]], ...] = (
    ("ens_name", lambda c: "ens" in c.tokens),
    ("chain_id", lambda c: {"chain", "id"} <= c.tokens or "chainid" in c.tokens),
    ("solana_address", lambda c: _in("solana")(c) and not _in("evm")(c) and _address_field(c)),
    ("evm_address", lambda c: _in("evm", "crypto")(c) and _address_field(c)),
    ("crypto_symbol", lambda c: _in("evm", "crypto", "solana")(c) and bool(c.tokens & {"symbol", "ticker", "coin"})),
    ("sql", lambda c: _in("sql")(c) and bool(c.tokens & {"query", "sql", "statement"})),
)
FIELD_KINDS: dict[str, Maker] = {  # field kind -> generator (a registry: one typed generator per kind)
    "ens_name": lambda c: ENS_NAMES[(c.index - 1) % len(ENS_NAMES)],
    "chain_id": lambda c: _CHAIN_IDS[(c.index - 1) % len(_CHAIN_IDS)],
    "solana_address": _base58,
    "evm_address": lambda c: _hex(c, 40),
    "crypto_symbol": lambda c: _CRYPTO_SYMBOLS[(c.index - 1) % len(_CRYPTO_SYMBOLS)],
    "sql": _sql,
    "description": lambda c: domain_text("description", c.domain, c.rng),
    "note": lambda c: note_text(c.rng, c.tokens, c.domain),
    "title": lambda c: domain_text("title", c.domain, c.rng),
    "rationale": lambda c: domain_text("rationale", c.domain, c.rng),
    "question": lambda c: domain_text("question", c.domain, c.rng),
    "topic": lambda c: c.domain.phrase(c.rng.randrange(max(1, len(c.domain.phrases)))),
    "category": lambda c: c.domain.word(c.rng.randrange(6)),
    "company": lambda c: f"{c.domain.word(c.rng.randrange(12), avoid=_person_names()).title()} "
                         f"{c.rng.choice(_COMPANY_SUFFIXES)}",  # fmt: skip
    "entity_name": lambda c: entity_name(c.domain, c.domain.word(0), c.index),
}


def field_kind(field: str, schema: Mapping[str, Any], domain: Domain) -> str | None:
    """The domain-specific kind of `field` (a key of `FIELD_KINDS`), or None when only its name says what it is."""
    context = _Ctx(tuple(field_tokens(field)), random.Random(0), 1, domain)
    return next((kind for kind, test in _DOMAIN_KIND_TESTS if test(context)), None)


def _has(*words: str) -> Callable[[_Ctx], bool]:
    wanted = frozenset(words)
    return lambda c: bool(c.tokens & wanted)


def _name_of_person(c: _Ctx) -> bool:
    named = "name" in c.tokens and bool(c.tokens & PERSON_TOKENS)
    return named or (bool(c.tokens) and c.tokens <= PERSON_TOKENS | {"fullname"})  # "owner", "assignee", "author"


def _key_value(c: _Ctx) -> str:
    if c.tokens & {"file", "object", "s3", "storage", "blob", "bucket"}:
        return f"{c.rng.choice(('uploads', 'exports', 'invoices', 'media'))}/{c.rng.choice(_FILES)}"
    return "".join(c.rng.choice("abcdef0123456789") for _ in range(24))


def _date_time(c: _Ctx) -> str:
    return f"{c.date()}T{c.rng.randint(7, 20):02d}:{c.rng.choice((0, 15, 30, 45)):02d}:00Z"


# Ordered (test, maker) rules: the first match wins. Tests read field-name tokens only.
_RULES: tuple[tuple[Callable[[_Ctx], bool], Maker], ...] = (
    (_has("email", "mail", "e-mail"), lambda c: c.fake().email(safe=True)),
    (_has("phone", "mobile", "tel", "telephone", "fax"), lambda c: c.fake().numerify("+1-###-555-####")),
    (_has("cnpj"), lambda c: c.fake("pt_BR").cnpj()),
    (_has("cpf"), lambda c: c.fake("pt_BR").cpf()),
    (_has("ssn"), lambda c: c.fake().ssn()),
    (_has("ein", "vat", "tin"), lambda c: c.fake().ein()),
    (_has("iban"), lambda c: c.fake().iban()),
    (_has("swift", "bic"), lambda c: c.fake().swift()),
    (_has("isbn"), lambda c: c.fake().isbn13()),
    (_has("ip", "ipv4", "ipaddress"), lambda c: c.fake().ipv4_private()),
    (_has("port"), lambda c: str(c.rng.choice((22, 80, 443, 3306, 5432, 6379, 8080, 8443, 9000)))),
    (
        _has("host", "hostname", "server", "domain"),
        lambda c: (
            c.fake().hostname(1)
            if "host" in c.tokens or "hostname" in c.tokens or "server" in c.tokens
            else c.fake().domain_name()
        ),
    ),  # fmt: skip
    (_has("url", "link", "website", "uri", "homepage", "endpoint", "webhook"), lambda c: c.fake().url()),
    (_has("uuid", "guid"), lambda c: str(c.fake().uuid4())),
    (_has("ticker", "symbol"), lambda c: c.rng.choice(_TICKERS)),
    (_has("crypto", "coin", "coins"), lambda c: c.rng.choice(_CRYPTO)),
    (_has("currency", "currencies"), lambda c: c.rng.choice(("USD", "EUR", "GBP", "JPY", "BRL"))),
    (_has("network", "chain", "blockchain"), lambda c: c.rng.choice(_NETWORKS)),
    (_has("hash", "txhash", "digest", "checksum"), lambda c: "0x" + "".join(c.rng.choice("0123456789abcdef")
                                                                           for _ in range(64))),  # fmt: skip
    (_has("barcode", "ean", "upc", "gtin"), lambda c: c.fake().ean13()),
    (
        lambda c: "first" in c.tokens and "name" in c.tokens or "firstname" in c.tokens,
        lambda c: c.fake().first_name(),
    ),  # fmt: skip
    (
        lambda c: bool(c.tokens & {"last", "sur"}) and "name" in c.tokens or bool(c.tokens & {"lastname", "surname"}),
        lambda c: c.fake().last_name(),
    ),  # fmt: skip
    (_has("username", "login", "handle", "nickname", "screenname"), lambda c: c.fake().user_name()),
    (_has("password", "passphrase"), lambda c: c.fake().password(length=14)),
    (_name_of_person, lambda c: c.fake().name()),
    (
        _has(
            "company",
            "organization",
            "organisation",
            "org",
            "employer",
            "vendor",
            "supplier",
            "brand",
            "manufacturer",
            "publisher",
            "merchant",
        ),
        FIELD_KINDS["company"],
    ),  # fmt: skip
    (_has("job", "occupation", "profession"), lambda c: c.fake().job()),
    (_has("city", "town", "destination", "origin", "location", "place", "venue"), lambda c: c.rng.choice(CITIES)),
    (lambda c: "country" in c.tokens and "code" in c.tokens, lambda c: c.fake().country_code()),
    (_has("country", "nationality"), lambda c: c.fake().country()),
    (_has("region", "province"), lambda c: c.rng.choice(_REGIONS)),
    (_has("zip", "zipcode", "postal", "postcode"), lambda c: c.fake().postcode()),
    (
        lambda c: "address" in c.tokens and bool(c.tokens & {"pool", "token", "wallet", "contract", "mint", "pair"}),
        lambda c: "0x" + "".join(c.rng.choice("0123456789abcdef") for _ in range(40)),
    ),  # fmt: skip
    (_has("address", "street"), lambda c: c.fake().street_address()),
    (
        lambda c: bool(c.tokens & {"connection", "dsn"}) and bool(c.tokens & {"string", "uri", "url", "dsn"}),
        lambda c: f"mongodb://{c.fake().hostname(1)}:27017/{c.rng.choice(_STORES)}",
    ),  # fmt: skip
    (
        _has("database", "db", "collection", "table", "bucket", "schema", "namespace", "index", "queue", "dataset"),
        lambda c: c.rng.choice(_STORES),
    ),  # fmt: skip
    (_has("key", "token", "secret", "apikey"), _key_value),
    (_has("pattern", "glob", "regex"), lambda c: c.rng.choice(_PATTERNS)),
    (_has("filename"), lambda c: c.rng.choice(_FILES)),
    (_has("directory", "dir", "folder", "root"), lambda c: c.rng.choice(_DIRS)),
    (
        _has("path", "file", "filepath", "source", "src", "dest"),
        lambda c: f"{c.rng.choice(_DIRS)}/{c.rng.choice(_FILES)}",
    ),
    (_has("command", "cmd", "shell"), lambda c: c.rng.choice(_COMMANDS)),
    (lambda c: bool(c.ordered) and c.ordered[-1] in ("id", "ids") and len(c.ordered) > 1,
     lambda c: f"{c.ordered[0][:3].upper()}-{c.rng.randint(1000, 9999)}"),  # session_id: SES-4821
    (_has("selector", "xpath"), lambda c: c.rng.choice(_SELECTORS)),
    (_has("expression", "formula", "equation"), lambda c: c.rng.choice(_EXPRESSIONS)),
    (_has("question"), FIELD_KINDS["question"]),
    (_has("package", "library", "dependency"), lambda c: c.rng.choice(_PACKAGES)),
    (_has("schedule", "cron"), lambda c: c.rng.choice(_CRONS)),
    (_has("pid"), lambda c: str(c.rng.randint(1200, 64000))),
    (_has("channel"), lambda c: c.rng.choice(_CHANNELS)),
    (_has("slug"), lambda c: re.sub(r"[^a-z0-9]+", "-", FIELD_KINDS["title"](c).lower()).strip("-")),
    (lambda c: c.tokens == {"task"}, FIELD_KINDS["title"]),
    (_has("context", "decision", "explanation", "rationale", "purpose", "usecase"),
     FIELD_KINDS["rationale"]),  # fmt: skip
    (lambda c: {"use", "case"} <= c.tokens, FIELD_KINDS["rationale"]),
    (_has("input", "plaintext"), lambda c: c.rng.choice((*_PHRASES, FIELD_KINDS["topic"](c)))),
    (
        lambda c: bool(c.tokens & {"number", "num", "no", "count", "page", "chapter", "verse", "juz", "hizb", "limit"}),
        lambda c: str(c.rng.randint(1, 30)),
    ),  # fmt: skip
    (_has("timestamp", "datetime"), _date_time),
    (lambda c: "at" in c.tokens and len(c.tokens) > 1, _date_time),
    (_has("date", "day", "birthday", "dob", "deadline", "due", "checkin", "checkout", "dates"), lambda c: c.date()),
    (lambda c: bool(c.tokens & {"check", "start", "end"} and c.tokens & {"in", "out"}), lambda c: c.date()),
    (lambda c: bool(c.tokens) and c.tokens <= {"start", "end", "from", "to", "since", "until"}, lambda c: c.date()),
    (_has("time", "hour"), lambda c: f"{c.rng.randint(7, 20):02d}:{c.rng.choice((0, 15, 30, 45)):02d}"),
    (_has("month"), lambda c: f"2025-{c.rng.randint(1, 12):02d}"),
    (_has("year"), lambda c: str(c.rng.randint(2019, 2025))),
    (_has("language", "lang", "locale"), lambda c: c.rng.choice(_LANGUAGES)),
    (_has("color", "colour"), lambda c: c.fake().color_name().lower()),
    (_has("version"), lambda c: f"{c.rng.randint(0, 4)}.{c.rng.randint(0, 20)}.{c.rng.randint(0, 9)}"),
    (_has("sku"), lambda c: c.fake().bothify("SKU-#####")),
    (_has("plate"), lambda c: c.fake().license_plate()),
    (_has("title", "headline", "subject"), FIELD_KINDS["title"]),
    (lambda c: bool(c.tokens & FREE_TEXT_TOKENS), FIELD_KINDS["note"]),
    (_has("query", "keyword", "keywords", "search", "term", "topic", "q", "prompt"), FIELD_KINDS["topic"]),
    (_has("category", "categories", "genre", "tag", "tags"), FIELD_KINDS["category"]),
    (_has("status", "state"), lambda c: c.rng.choice(_STATUS)),
    (_has("code"), lambda c: c.fake().bothify("??-####").upper()),
    (lambda c: c.tokens == {"name"}, FIELD_KINDS["entity_name"]),
)
_FORMATS: dict[str, Maker] = {
    "date": lambda c: c.date(),
    "date-time": _date_time,
    "time": lambda c: f"{c.rng.randint(7, 20):02d}:00:00",
    "email": lambda c: c.fake().email(safe=True),
    "uri": lambda c: c.fake().url(),
    "url": lambda c: c.fake().url(),
    "hostname": lambda c: c.fake().hostname(1),
    "ipv4": lambda c: c.fake().ipv4_private(),
    "uuid": lambda c: str(c.fake().uuid4()),
}


def typed_value(
    field: str, schema: Mapping[str, Any], rng: random.Random, *, index: int = 1, domain: Domain | None = None
) -> str | None:
    """A realistic string for `field`, or None when neither its format nor its name says what it holds.

    Args:
        field: field or parameter name (``customer_email``, ``cnpj``, ``checkInDate``).
        schema: its JSON schema; a known ``format`` wins over the name.
        rng: the caller's seeded generator (the only source of randomness).
        index: record number: the n-th record of a kind with well-known values (chain id "1", "vitalik.eth") takes
            the n-th of them, so the values a real user would give exist.
        domain: the environment's domain (`envgen.domain.domain_of`); free text is composed from its words and
            its kinds decide what an "address" or a "symbol" is. Without one, the field's own description is the
            domain.

    Example:
        >>> typed_value("customer_email", {}, random.Random(1)).endswith((".com", ".org", ".net"))
        True
    """
    fmt = str(schema.get("format") or "")
    domain = domain or domain_of_schema(field, schema)
    context = _Ctx(tuple(field_tokens(field)), rng, index, domain)
    if fmt in _FORMATS:
        return str(_FORMATS[fmt](context))
    kind = next((kind for kind, test in _DOMAIN_KIND_TESTS if test(context)), None)
    if kind is not None:
        return str(FIELD_KINDS[kind](context))
    for test, make in _RULES:
        if test(context):
            return str(make(context))
    return None


_EXAMPLES_IN_TEXT = (
    re.compile(r"\b(?:e\.g\.?|eg\.|for example|such as)[,:]?\s*(.+?)(?:\)|\.\s|\.?$)", re.IGNORECASE),
    re.compile(r"\(([A-Za-z0-9_.\-]+(?:,\s*[A-Za-z0-9_.\-]+){2,})\)"),  # "(architect, ask, code, debug)"
    re.compile(r"例如\s*(.+?)(?:等|$)"),
)


def schema_examples(schema: Mapping[str, Any]) -> tuple[str, ...]:
    """The string values a field's own schema offers: `default`, `example(s)`, and the list after "e.g." (or a
    parenthesized list) in its description (`"Network ID (e.g., ethereum, solana)"` -> ethereum, solana)."""
    found: list[str] = []
    for key in ("default", "example"):
        if isinstance(schema.get(key), str):
            found.append(schema[key])
    if isinstance(schema.get("examples"), list):
        found.extend(v for v in schema["examples"] if isinstance(v, str))
    description = str(schema.get("description") or "")
    for pattern in _EXAMPLES_IN_TEXT:
        if match := pattern.search(description):
            found.extend(re.split(r",\s*|，\s*|\s+or\s+", match.group(1)))
            break
    cleaned = (v.strip().strip("'\"`“”").strip() for v in found)
    return tuple(dict.fromkeys(v for v in cleaned if 0 < len(v) <= 40 and v.count(" ") <= 3))


@functools.lru_cache(maxsize=4096)  # a pure function of its arguments; quality checks ask per argument
def plain_words(field: str, choices: int = 4) -> tuple[str, ...]:
    """The plain English words `plain_value` may give `field` (fixed by its name)."""
    faker = _faker("en_US")
    faker.seed_instance(zlib.crc32(field.encode("utf-8")))
    return tuple([w for w in faker.words(choices * 3, unique=True) if len(w) > 3][:choices] or ["standard"])


def plain_value(
    field: str, rng: random.Random, *, choices: int = 4, index: int | None = None, domain: Domain | None = None
) -> str:
    """A word for a field nothing else describes: with a `domain`, one of its own words (fixed by the field's name,
    so several records share a value and filters find them); without one, one of `choices` plain English words
    fixed by the name (`plain_words`) — never "<codename> <field>". The last resort: `gust quality` measures how
    many tasks carry one (`plain_word_task_share`, `stray_word_task_share`)."""
    if domain is not None and domain.words:
        start = stable_index(domain.label, field) % max(1, len(domain.words))
        step = (index - 1) // 2 if index is not None else rng.randrange(choices)
        return domain.word(start + step % choices, avoid=(*field_tokens(field), *_person_names()))
    words = list(plain_words(field, choices))
    if index is not None:  # records 1-2, 3-4, ... share a value: a filter on it finds two records
        return words[((index - 1) // 2) % len(words)]
    return rng.choice(words)
