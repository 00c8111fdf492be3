"""The secret filter every written text passes: which values are secrets, and masking them.

A secret is known by its *key* (a mapping entry or `key=value` override named like a credential:
`api_key`, `token`, `Authorization`, ...) or by its *value*: credential-like environment variables,
the variables a config names in `api_key_env`, the values of credential-like config entries and
overrides, and the password of a URL (`http://user:PASSWORD@host/v1`) anywhere in a config, an
override or the environment. `known_secrets()` is every value this process knows of: what the
environment and command line hold, plus what an entry point registered from its config with
`remember_secrets` (a key written in a YAML file is in neither).

Only a value that looks like a credential is masked by value (`looks_like_credential`): at least
8 characters, no whitespace, not digits alone (a count, an id) and not a plain word or words
(letters joined by `-_.:/`, such as `complete`, `sk-no-key-required`, `EMPTY`), unless a run of
24 letters or more, or letters whose case changes are not word-shaped (random letters). Any other
value a credential-like variable holds (a placeholder such as `DUMMY_TOKEN=complete`) is not a
secret: masking it would rewrite ordinary words and the records' fields (`"status": "***"`); the
job's log names such variables once (`unmasked_variables`, at INFO), never their values.

`scrub` masks the known values in a text, and the forms a server or model may echo them in
(`Spelling`): any case, any of its characters `%`-encoded (all, none or some: `%73%6B%2D...`,
`sk%2D...`; either hex case), up to 3 whitespace characters between any two characters, and
base64 (the whole base64 run holding it: an `Authorization: Basic` echo of `user:KEY`). The
writers of `esc.jsonl` (every dialogue, score and report file), the report site's pages, the W&B
payload, the request cache and the log and console filters of `esc.masking` call it, so a
key a model echoes in its reply is masked in every file a run writes. `redact` masks the strings
inside a record and never its keys or the values of its structural fields (`status`, ...).
This module is below every other (it imports nothing from `esc`) so that the file writers can use it.
"""

from __future__ import annotations

import base64
import functools
import html
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

import markupsafe

MASK = "***"
#: key names that hold credentials (matched at the end of the name, case-insensitive)
SECRET_KEY = re.compile(
    r"(api[_-]?key|secret|password|passwd|token|authorization|credentials?|cookie|bearer)$", re.IGNORECASE
)
#: credential-like names that are not credentials
NOT_SECRET = frozenset(
    {"api_key_env", "pad_token", "eos_token", "bos_token", "unk_token", "max_new_tokens", "max_tokens"}
)
#: values shorter than this are never treated as secrets (they would mask ordinary words)
MIN_SECRET_LENGTH = 8
#: a value of letters only is a credential when it holds a run of this many letters (no word is so long)
LONG_LETTER_RUN = 24
#: record fields whose values are code-made names (an enum), never free text: `redact` leaves them
STRUCTURAL_FIELDS = frozenset({"status", "speaker", "role", "kind", "language"})
_WORDS = re.compile(r"[A-Za-z]+(?:[-_.:/][A-Za-z]+)*")
_WORD = re.compile(r"(?:[A-Z]?[a-z]{2,}|[A-Z]{2,})+")  # lowercase, Capitalized, CAPITALS, camelCase
_IDENTIFIER = re.compile(r"[\w.:-]{1,40}")
#: the user information of a URL: scheme://USER:PASSWORD@host
#: (no quotes, brackets or backslashes inside: masking never reaches across a JSON or HTML string's end)
URL_USERINFO = re.compile(
    r"[A-Za-z][A-Za-z0-9+.-]*://(?P<user>[^/@\s:\"'<>\\]*):(?P<password>[^/@\s\"'<>\\]+)@"
)

_remembered: set[str] = set()
_told: set[str] = set()  # the variables `remember_secrets` said are not masked (once each)
_lock = threading.Lock()
log = logging.getLogger(__name__)


def looks_like_credential(value: str) -> bool:
    """Whether `value` is masked wherever it appears: long enough, no whitespace, not a number and
    not made of words (see the module's docstring)."""
    if len(value) < MIN_SECRET_LENGTH or value == MASK or any(c.isspace() for c in value):
        return False
    if value.isdigit():
        return False
    if not _WORDS.fullmatch(value):
        return True  # digits or symbols among letters: a key, a token, a password
    runs = re.split(r"[-_.:/]", value)
    return any(len(run) >= LONG_LETTER_RUN or not _WORD.fullmatch(run) for run in runs)


def is_secret_key(name: object) -> bool:
    text = str(name)
    return text not in NOT_SECRET and not text.endswith("_env") and bool(SECRET_KEY.search(text))


def url_passwords(text: str) -> set[str]:
    """The passwords of the URLs in `text` (`http://user:PASSWORD@host`), as written and decoded, and
    the HTTP Basic credentials they become (base64 of `user:password`: what the client sends, and what a
    careless server echoes)."""
    found: set[str] = set()
    if "@" not in text:
        return found
    for match in URL_USERINFO.finditer(text):
        user, password = match.group("user"), match.group("password")
        found |= {password, unquote(password)}
        basic = f"{unquote(user)}:{unquote(password)}".encode()
        found.add(base64.b64encode(basic).decode("ascii"))
    return found


def strip_url_credentials(text: str) -> str:
    """`text` with the user information of every URL in it masked: `http://***@host/v1`."""
    return URL_USERINFO.sub(lambda m: m.group(0).split("://", 1)[0] + f"://{MASK}@", text)


def _config_secrets(obj: Any, found: set[str], env_names: set[str]) -> None:
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if str(key).endswith("api_key_env") and isinstance(value, str):
                env_names.add(value)
            if is_secret_key(key) and isinstance(value, str | int) and not isinstance(value, bool):
                found.add(str(value))
            _config_secrets(value, found, env_names)
    elif isinstance(obj, list | tuple):
        for value in obj:
            _config_secrets(value, found, env_names)
    elif isinstance(obj, str):
        found |= url_passwords(obj)


def _override_secrets(args: Iterable[str]) -> set[str]:
    found = set()
    for arg in args:
        key, sep, value = str(arg).lstrip("+~").partition("=")
        if sep and is_secret_key(key.rsplit(".", 1)[-1]):
            found.add(value.strip("'\""))
        found |= url_passwords(str(arg))
    return found


def secret_values(config: Any = None, argv: Iterable[str] | None = None) -> list[str]:
    """Every secret value this process knows of, those of `config` and of the command line (`argv`,
    default `sys.argv`) included, longest first (so that longer ones mask first)."""
    found: set[str] = set()
    env_names = {name for name in os.environ if is_secret_key(name)}
    _config_secrets(config, found, env_names)
    found |= _override_secrets(sys.argv[1:] if argv is None else argv)
    found |= {os.environ[name] for name in env_names if os.environ.get(name)}
    for value in os.environ.values():
        found |= url_passwords(value)  # a proxy URL with a password, say
    with _lock:
        found |= _remembered
    found = {value.strip() for value in found}
    found |= {value.split()[-1] for value in found if " " in value}  # "Bearer <key>": the key alone too
    return sorted((v for v in found if looks_like_credential(v)), key=len, reverse=True)


def remember_secrets(config: Any) -> None:
    """Register the secrets of `config` (a plain container) for the rest of this process: an entry point
    calls it once its config is composed, so that every later write masks them too."""
    found: set[str] = set()
    env_names: set[str] = set()
    _config_secrets(config, found, env_names)
    found |= {os.environ[name] for name in env_names if os.environ.get(name)}
    with _lock:
        _remembered.update(v.strip() for v in found if len(v.strip()) >= MIN_SECRET_LENGTH)
    # (the rule is applied by `secret_values`, after "Bearer <key>" is split into its key)
    names = unmasked_variables(env_names)
    with _lock:
        names -= _told
        _told.update(names)
    if names:
        log.info(
            "not masked, not the shape of a credential (a word, a number, under %d characters): "
            "the value of %s",
            MIN_SECRET_LENGTH,
            ", ".join(sorted(names)),
        )


def unmasked_variables(names: Iterable[str] = ()) -> set[str]:
    """The environment variables named like credentials (and `names`, those a config names in
    `api_key_env`) whose values are not masked (`looks_like_credential`): placeholders such as
    `DUMMY_TOKEN=complete`. Names only: what a run's log says of them."""
    candidates = {name for name in os.environ if is_secret_key(name)} | set(names)
    unmasked = set()
    for name in candidates:
        value = os.environ.get(name, "").strip()
        key = value.split()[-1] if value else ""  # "Bearer <key>": the key
        if value and not looks_like_credential(value) and not looks_like_credential(key):
            unmasked.add(name)
    return unmasked


def forget_secrets() -> None:
    """Drop what `remember_secrets` registered (tests that run several jobs in one process)."""
    with _lock:
        _remembered.clear()
        _told.clear()


def known_secrets() -> list[str]:
    """`secret_values()`: the environment's, the command line's and the remembered configs'."""
    return secret_values()


BLOCK = 1 << 14  # characters a long text is searched by (`Spelling.matches`)
_WS = b" \t\n\r\x0b\x0c"
#: whitespace an echo may insert between two characters, as itself or JSON-escaped (`\n` in a JSON text)
_GAP = r"(?:[ \t\n\r\x0b\x0c]|\\[nrt]){0,3}"
_BASE64_CHARS = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_")


def _without_gaps(text: str) -> bytes:
    """`text` as UTF-8 without what `_GAP` allows between two characters of a secret."""
    data = text.encode("utf-8", "surrogatepass").translate(None, _WS)
    if b"\\" in data:
        data = data.replace(b"\\n", b"").replace(b"\\r", b"").replace(b"\\t", b"")
    return data


def _base64_fragments(value: str) -> set[bytes]:
    """What every base64 encoding (standard or URL-safe) of a text holding `value` contains: for each
    of the 3 offsets `value` can start at in a 3-byte group, the characters made of its bits alone."""
    raw = value.encode("utf-8")
    found = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw)
        fragment = encoded[(offset * 8 + 5) // 6 : (offset + len(raw)) * 8 // 6]
        found |= {fragment, fragment.translate(bytes.maketrans(b"+/", b"-_"))}
    return found


def _percent(char: str) -> str:
    """`char`'s UTF-8 bytes, each `%`-encoded (the caller's regex ignores case: either hex case)."""
    return "".join(f"%{b:02X}" for b in char.encode("utf-8", "surrogatepass"))


def _spelled(value: str) -> str:
    """A regex for `value` as an echo may write it: each character as itself or `%`-encoded (any mix:
    `%73%6B%2D...`, only the `-` as `%2D`; either hex case; a letter's other case encoded too), up to
    3 whitespace characters between two. The caller compiles it ignoring case; its size is linear in
    the value's (a few alternatives a character), so a set of secrets compiles in bounded time."""
    chars = []
    for char in value:
        forms = {_percent(c) for c in (char, char.lower(), char.upper()) if len(c) == 1}
        encoded = "|".join(re.escape(form) for form in sorted(forms))
        chars.append(f"(?:{re.escape(char)}|{encoded})")
    return _GAP.join(chars)


class Spelling:
    """The secrets of one set, compiled once (`_spelling`): a quick test of whether a text may hold
    one in any form, and the regex that finds each."""

    def __init__(self, values: tuple[str, ...]) -> None:
        self.plain = [_without_gaps(v).lower() for v in values]
        self.fragments = sorted({f for v in values for f in _base64_fragments(v)}, key=len, reverse=True)
        base64_part = "|".join(_GAP.join(re.escape(c) for c in f.decode("ascii")) for f in self.fragments)
        text_part = "|".join(_spelled(v) for v in values)
        self.pattern = re.compile(f"(?P<b64>{base64_part})|(?i:{text_part})")
        self.longest = 4 * 9 * max(len(v.encode("utf-8")) for v in values)  # %XX and 3 spaces a byte

    def may_hold(self, text: str) -> bool:
        """False when no form of any secret can be in `text` (fast: the usual case)."""
        data = _without_gaps(text)
        if any(fragment in data for fragment in self.fragments):
            return True
        folded = data.lower()
        if b"%" in folded:
            folded += b"\n" + unquote_to_bytes(folded).lower()
        return any(value in folded for value in self.plain)

    def matches(self, text: str) -> Iterator[re.Match[str]]:
        """The matches in `text`; in a long text the regex runs only on the blocks that `may_hold` one
        (blocks overlap by the longest match, each match is reported by the block it starts in)."""
        if not self.may_hold(text):
            return
        if len(text) <= 2 * BLOCK:
            yield from self.pattern.finditer(text)
            return
        for block in range(0, len(text), BLOCK):
            end = min(len(text), block + BLOCK + self.longest)
            if self.may_hold(text[block:end]):
                for match in self.pattern.finditer(text, block, end):
                    if match.start() < block + BLOCK:
                        yield match

    def mask(self, text: str) -> str:
        """`text` with every form found masked; a base64 match masks the whole base64 run around it."""
        found: list[tuple[int, int]] = []
        for match in self.matches(text):
            start, end = match.span()
            if match.group("b64") is not None:
                while start > 0 and ord(text[start - 1]) in _BASE64_CHARS:
                    start -= 1
                while end < len(text) and (ord(text[end]) in _BASE64_CHARS or text[end] == "="):
                    end += 1
            found.append((start, end))
        spans: list[list[int]] = []
        for start, end in sorted(found):
            if spans and start <= spans[-1][1]:
                spans[-1][1] = max(end, spans[-1][1])
            else:
                spans.append([start, end])
        if not spans:
            return text
        parts, last = [], 0
        for start, end in spans:
            parts += [text[last:start], MASK]
            last = end
        return "".join([*parts, text[last:]])


def _html_forms(value: str) -> set[str]:
    """`value` as an HTML page writes it (Jinja's autoescape and `html.escape` spell `'` and `"`
    differently): a page is masked after it is rendered, so a key holding `&`, `<` or a quote is
    searched in these forms too."""
    forms = {html.escape(value, quote=True), str(markupsafe.escape(value))}
    return forms - {value}


@functools.lru_cache(maxsize=64)
def _spelling(values: tuple[str, ...]) -> Spelling | None:
    credentials = {v for v in values if looks_like_credential(v)}
    credentials |= {form for v in credentials for form in _html_forms(v)}
    ordered = tuple(sorted(credentials, key=len, reverse=True))
    return Spelling(ordered) if ordered else None


def spelling_of(values: Iterable[str]) -> Spelling | None:
    """The compiled filter of `values` (those that look like credentials; None if none does)."""
    return _spelling(tuple(sorted(set(values))))


def _scrub(text: str, spelling: Spelling | None) -> str:
    if spelling is not None:
        text = spelling.mask(text)
    return strip_url_credentials(text) if "@" in text else text


def scrub_text(text: str, values: Iterable[str]) -> str:
    """`text` with each of `values` that looks like a credential masked, in each form an echo may
    write it (`Spelling`), and URL passwords masked."""
    return _scrub(text, spelling_of(values))


def scrub(text: str) -> str:
    """`text` with every known secret masked: what each writer calls on what it writes."""
    return scrub_text(text, known_secrets())


def scrub_strings(obj: Any, values: Iterable[str] | None = None) -> Any:
    """A copy of `obj` (a record: mappings, lists, strings) with the secret values masked inside its
    strings; keys, and the code-made names of `STRUCTURAL_FIELDS`, are never rewritten.

    `values`: the secret values to mask (default: `known_secrets()`).
    """
    return _walk(obj, spelling_of(known_secrets() if values is None else values), by_key=False)


def redact(obj: Any, values: Iterable[str] | None = None) -> Any:
    """`scrub_strings`, and the value of every credential-like entry (`api_key`, ...) masked too.

    `values`: the secret values to mask inside strings (default: `secret_values(obj)`).
    """
    return _walk(obj, spelling_of(secret_values(obj) if values is None else values), by_key=True)


def _walk(obj: Any, spelling: Spelling | None, by_key: bool) -> Any:
    def entry(key: Any, value: Any) -> Any:
        if by_key and is_secret_key(key) and value not in (None, ""):
            return MASK
        if key in STRUCTURAL_FIELDS and isinstance(value, str) and _IDENTIFIER.fullmatch(value):
            return value
        return walk(value)

    def walk(item: Any) -> Any:
        if isinstance(item, Mapping):
            return {k: entry(k, v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [walk(v) for v in item]
        if isinstance(item, str):
            return _scrub(item, spelling)
        return item

    return walk(obj)
