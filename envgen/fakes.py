"""Realistic, typed, seeded values by field name and format — the one source of mock-DB and argument values.

A value is chosen from what the field's name (``customer_email``, ``cnpj``, ``check_in``, ``host``) or JSON-schema
``format`` says it holds: person and company names, e-mails, cities, street addresses, dates, hostnames, ports,
tickers, Brazilian CNPJ/CPF numbers, IBANs, ... Faker (pinned in constraints.txt) supplies the locale data; free
text (notes, descriptions, titles) comes from the small tables below, because Faker's sentences are lorem-like word
salad. Every value is a pure function of the caller's `random.Random`: a Faker instance is re-seeded from it per
value, and no relative ("today") date is used, so builds stay reproducible offline.

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

__all__ = [
    "CITIES",
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

_NOTES = (
    "Please handle this before Friday.", "Customer asked for a quick follow-up.",
    "Leave the package at the front desk.",
    "Prefers contact by email.", "Needed for the quarterly review.",
    "Ring the bell twice; the buzzer is broken.",
    "Second request this month, please prioritise.", "Invoice should go to the finance team.",
    "Allergic to peanuts.", "Late arrival expected, around 10 pm.", "Gift wrap if possible.",
    "Approved by the regional manager.", "Replace the damaged unit, not a refund.", "Call before delivery.",
    "Aisle seat preferred.", "Budget is fixed for this quarter.", "Send the signed copy to legal.",
    "Duplicate of last week's ticket.", "Use the side entrance after 6 pm.", "Keep the original receipt.",
)  # fmt: skip
_DESCRIPTIONS = (
    "Stainless steel, dishwasher safe, 350 ml.", "Lightweight model with a two-year warranty.",
    "Covers onboarding for new support staff.", "Weekly sync on the data migration.",
    "Water-resistant shell with taped seams.", "Quarterly budget for the marketing team.",
    "Refurbished unit, tested and cleaned.", "Includes breakfast and late checkout.",
    "Handles password resets for the customer portal.", "Beginner course, six sessions, evenings.",
    "Replacement part for the 2021 model.", "Shared calendar for the design team.",
    "Organic cotton, machine washable.", "Fixes the login timeout on mobile.", "Sea-view room with a balcony.",
)  # fmt: skip
_TITLES = (
    "Quarterly budget review", "Onboarding checklist", "Website redesign kickoff", "Fix login timeout on mobile",
    "Migrate billing to the new API", "Team offsite planning", "Customer churn analysis", "Update privacy policy",
    "Spring product launch", "Vendor contract renewal", "Security audit follow-up", "Hiring plan for Q3",
    "Warehouse inventory count", "Annual performance reviews", "Newsletter for March", "Office move logistics",
)  # fmt: skip
_TOPICS = (
    "solar panels", "trail running", "sourdough baking", "jazz history", "climate policy", "budget travel",
    "machine learning", "home gardening", "electric cars", "chess openings", "remote work", "coffee brewing",
)  # fmt: skip
_CATEGORIES = ("electronics", "garden", "kitchen", "outdoor", "office", "books", "toys", "health", "sports", "beauty")
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
_QUESTIONS = ("What are the opening hours on Sunday?", "How do I reset my password?",
              "Which plan includes priority support?", "Is the order eligible for a refund?",
              "When does the next release ship?", "Where is the nearest service center?")  # fmt: skip
_PHRASES = ("hello world", "The quick brown fox", "order-2025-0413", "Meeting notes for Monday", "user@42",
            "Release v2.4 is ready")  # fmt: skip
_NETWORKS = ("ethereum", "solana", "polygon", "arbitrum", "base", "bsc")
_PACKAGES = ("requests", "numpy", "lodash", "express", "laravel/framework", "react", "pandas", "guzzlehttp/guzzle")
_RATIONALES = (
    "Move reporting to PostgreSQL for its JSON support.", "Keep the current vendor until the contract ends.",
    "Ship the beta to internal users first.", "Cache results for ten minutes to cut API costs.",
    "Split billing out of the monolith into its own service.", "Put the new checkout behind a feature flag.",
)  # fmt: skip
_CHANNELS = ("general", "alerts", "team-updates", "support", "release-notes", "random")
_CRONS = ("0 9 * * 1-5", "*/15 * * * *", "0 0 1 * *", "30 18 * * 5", "0 */6 * * *")
CITIES = (
    "Lisbon", "Toronto", "Osaka", "Nairobi", "Denver", "Krakow", "Melbourne", "Bogota", "Oslo", "Austin",
    "Berlin", "Lima", "Seoul", "Dublin", "Perth", "Sao Paulo", "Cape Town", "Vancouver", "Lyon", "Porto",
)  # fmt: skip


_PER_THREAD = threading.local()


def _faker(locale: str) -> Any:
    """This thread's Faker for `locale`: callers re-seed it per value, so threads (envgen builds several toolsets
    at once) must not share one, or a value would depend on another thread's timing."""
    from faker import Faker  # imported on first use: a ~0.4 s import

    fakers = _PER_THREAD.__dict__.setdefault("fakers", {})
    if locale not in fakers:
        fakers[locale] = Faker(locale)
    return fakers[locale]


class _Ctx:
    """One value request: the tokens of the field name and a Faker re-seeded from the caller's rng."""

    def __init__(self, ordered: tuple[str, ...], rng: random.Random, index: int) -> None:
        self.ordered, self.tokens, self.rng, self.index = ordered, frozenset(ordered), rng, index
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


def note_text(rng: random.Random, tokens: frozenset[str] = frozenset()) -> str:
    """A realistic free-text note or description (descriptions describe a thing, notes ask for something)."""
    table = _DESCRIPTIONS if tokens & {"description", "details", "summary", "bio", "content", "body"} else _NOTES
    return rng.choice(table)


def title_text(rng: random.Random) -> str:
    return rng.choice(_TITLES)


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
        lambda c: c.fake().company(),
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
    (_has("question"), lambda c: c.rng.choice(_QUESTIONS)),
    (_has("package", "library", "dependency"), lambda c: c.rng.choice(_PACKAGES)),
    (_has("schedule", "cron"), lambda c: c.rng.choice(_CRONS)),
    (_has("pid"), lambda c: str(c.rng.randint(1200, 64000))),
    (_has("channel"), lambda c: c.rng.choice(_CHANNELS)),
    (_has("slug"), lambda c: re.sub(r"[^a-z0-9]+", "-", title_text(c.rng).lower()).strip("-")),
    (lambda c: c.tokens == {"task"}, lambda c: title_text(c.rng)),
    (_has("context", "decision", "explanation", "rationale", "purpose", "usecase"),
     lambda c: c.rng.choice(_RATIONALES)),  # fmt: skip
    (lambda c: {"use", "case"} <= c.tokens, lambda c: c.rng.choice(_RATIONALES)),
    (_has("input", "plaintext"), lambda c: c.rng.choice(_PHRASES)),
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
    (_has("title", "headline", "subject"), lambda c: title_text(c.rng)),
    (lambda c: bool(c.tokens & FREE_TEXT_TOKENS), lambda c: note_text(c.rng, c.tokens)),
    (_has("query", "keyword", "keywords", "search", "term", "topic", "q", "prompt"), lambda c: c.rng.choice(_TOPICS)),
    (_has("category", "categories", "genre", "tag", "tags"), lambda c: c.rng.choice(_CATEGORIES)),
    (_has("status", "state"), lambda c: c.rng.choice(_STATUS)),
    (_has("code"), lambda c: c.fake().bothify("??-####").upper()),
    (lambda c: c.tokens == {"name"}, lambda c: c.fake().name()),
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


def typed_value(field: str, schema: Mapping[str, Any], rng: random.Random, *, index: int = 1) -> str | None:
    """A realistic string for `field`, or None when neither its format nor its name says what it holds.

    Args:
        field: field or parameter name (``customer_email``, ``cnpj``, ``checkInDate``).
        schema: its JSON schema; a known ``format`` wins over the name.
        rng: the caller's seeded generator (the only source of randomness).
        index: record number (kept for callers that number records; values do not embed it).

    Example:
        >>> typed_value("customer_email", {}, random.Random(1)).endswith((".com", ".org", ".net"))
        True
    """
    fmt = str(schema.get("format") or "")
    context = _Ctx(tuple(field_tokens(field)), rng, index)
    if fmt in _FORMATS:
        return str(_FORMATS[fmt](context))
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


def plain_value(field: str, rng: random.Random, *, choices: int = 4, index: int | None = None) -> str:
    """A plain English word for a field nothing else describes: one of `choices` words fixed by the field's name
    (so several records share a value and filters find them), picked with `rng` — never "<codename> <field>".
    The last resort: `gust quality` measures how many tasks carry one (`plain_word_task_share`)."""
    words = list(plain_words(field, choices))
    if index is not None:  # records 1-2, 3-4, ... share a value: a filter on it finds two records
        return words[((index - 1) // 2) % len(words)]
    return rng.choice(words)
