"""One rule for secrets, used by every writer and every printer of this tool.

The recorder (manifests, ledger), the live probe (its answer and memo) and the CLI (every
``--json`` and text output) hide secrets with these functions, so a value hidden in one place
is hidden in all:

* :func:`is_secret_name` -- does a field, variable or flag name hold a secret
  (``hf_token``, ``HF_TOKEN``, ``hfToken``, ``api_keys``, ``Authorization``, ``--api-key``;
  not ``tokenizer``, ``tokenizer_mode``, ``max_num_batched_tokens``, ``torch_key``);
* :func:`redact_value` -- a JSON-like value with secrets replaced, recursively: dicts (a whole
  dict under a secret name), lists, JSON text, URLs with ``user:pass@``, Python reprs,
  ``name/old/new`` records, known token shapes (``hf_...``, ``sk-...``, ``Bearer ...``);
* :func:`redact_argv` -- a command line (``--flag value`` and ``--flag=value``; vLLM's boolean
  flags never hide the next argument; JSON-valued flags are redacted inside);
* :func:`redact_env` -- an environment mapping;
* :func:`redact_text` -- free text such as a log line or a rendered table row.

A hidden value becomes ``<redacted:3f9c0a1b2c4d>``: a keyed digest (HMAC-SHA256 under a random
per-user key kept in ``<user state dir>/vllm-cache-tools/redaction-key``, mode 0600), so "the
token changed" still shows on this host while the digest cannot be reversed by hashing guesses.
Where no key can be had (read-only home, a key file that is not the user's own private
file), the value becomes plain ``<redacted>``.

Standard library only, and free of imports from this package: the live probe loads this file
by path inside the user's vLLM environment, and the recorder imports it inside vLLM.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

REDACTED = "<redacted>"
"""A hidden value when no digest key is available."""
MAX_DEPTH = 24
"""Nesting deeper than this is replaced whole: it cannot be inspected cheaply, so it is not
shown (real vLLM configs and this tool's payloads stay well under it)."""
TOO_DEEP = "<redacted: nested too deep to inspect>"
MAX_JSON_TEXT = 1 << 20
"""JSON text longer than this inside a string is scanned as text, not parsed."""

# --- names ----------------------------------------------------------------------------------

_ANYWHERE = frozenset({
    "secret", "secrets", "password", "passwords", "passwd", "passphrase", "credential",
    "credentials", "authorization", "cookie", "cookies", "apikey", "apikeys", "privatekey",
    "secretkey", "accesskey", "authtoken", "accesstoken", "apitoken", "hftoken",
    "refreshtoken", "sessiontoken", "bearertoken", "idtoken", "authkey", "xsrf", "csrftoken",
})
"""Words that make any name a secret's name, wherever they stand."""
_NOT_SECRET_TOKEN = frozenset({
    # Vocabulary tokens of a tokenizer and token counts, not credentials.
    "bos", "eos", "pad", "unk", "sep", "cls", "mask", "special", "start", "end", "begin",
    "image", "video", "audio", "placeholder", "stop", "think", "reasoning", "tool", "added",
    "default", "first", "last", "next", "max", "min", "num", "per", "new", "input", "output",
    "prompt", "generated", "decode", "prefill", "eot", "eom", "im", "bot", "vision", "media",
})
"""``<word>_token`` names that are a tokenizer's vocabulary or a count."""
_NOT_SECRET_KEY = frozenset({
    # Dictionary and cache keys: this tool's own fields (entry key, torch_key, ...) and
    # vLLM's / torch's (cache_key, hash keys, sort keys).
    "cache", "hash", "sort", "dict", "lookup", "entry", "routing", "partition", "primary",
    "foreign", "model", "group", "layer", "metric", "shard", "index", "name", "map",
    "column", "row", "event", "kv", "prompt", "lora", "tree", "sequence", "seq", "request",
    "block", "prefix", "message", "response", "json", "yaml", "config", "field", "attr",
    "attribute", "dataset", "label", "input", "output", "query", "torch", "aot", "backend",
    "same", "recomputed", "memo", "slot", "rank", "old", "new", "closest", "graph", "range",
    "compile", "dedup", "cudagraph", "inductor", "triton", "fx", "guard", "code", "source",
    "file", "path", "dir", "folder", "bucket", "object", "region", "task", "mm", "encoder",
    "expert", "hotkey", "api_version", "version", "ssl", "tls", "public",
})
"""``<word>_key`` names that are not credentials (an unknown ``<word>_key`` is hidden)."""
_CREDENTIAL = frozenset({
    "api", "access", "secret", "private", "auth", "hf", "refresh", "session", "bearer",
    "client", "master", "ssh", "encryption", "signing", "id", "oauth", "app", "service",
    "account", "user", "personal", "github", "gh", "openai", "wandb",
})
"""Qualifiers that make a plural ``<word>_tokens`` / ``<word>_keys`` a list of credentials
(``api_keys``; ``max_num_batched_tokens`` is a count)."""

_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_SPLIT = re.compile(r"[^A-Za-z0-9]+")


def name_words(name: str) -> list[str]:
    """``hfToken`` -> hf, token; ``AWS_SECRET_ACCESS_KEY`` -> aws, secret, access, key;
    ``--kv-transfer-config.api_key`` -> kv, transfer, config, api, key."""
    out: list[str] = []
    for chunk in _SPLIT.split(name):
        out += [w.lower() for w in _CAMEL.findall(chunk)]
    return out


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a field, variable, header or flag named ``name`` holds a secret.

    Secret: any name with a word such as ``secret``, ``password``, ``credentials``,
    ``authorization``, ``apikey``; a name ending in ``token`` (``hf_token``, ``HF_TOKEN``,
    ``hfToken``, ``token``; not ``bos_token``), in ``<word>_key`` (``api_key``,
    ``encryption_key``; not ``torch_key``, ``cache_key`` or a bare ``key``), in ``auth``, in
    ``<credential>_tokens`` / ``_keys`` (``api_keys``), or ``access_key_id``.
    Not secret: ``tokenizer``, ``tokenizer_mode``, ``max_num_batched_tokens``,
    ``num_speculative_tokens``, ``return_tokens_as_token_ids``, ``hf_token_path``."""
    words = name_words(name)
    if not words:
        return False
    if any(w in _ANYWHERE for w in words):
        return True
    last = words[-1]
    prev = words[-2] if len(words) > 1 else None
    if last == "token":
        return prev not in _NOT_SECRET_TOKEN
    if last == "key":
        return prev is not None and prev not in _NOT_SECRET_KEY
    if last in ("tokens", "keys"):
        return prev in _CREDENTIAL
    if last == "auth":
        return True
    if last in ("id", "ids") and prev == "key" and len(words) > 2:
        return words[-3] in _CREDENTIAL  # AWS_ACCESS_KEY_ID: the public half, still kept out
    return False


# --- the digest key -------------------------------------------------------------------------

KEY_FILENAME = "redaction-key"
KEY_BYTES = 32
_KEYS: dict[str, bytes | None] = {}
"""Keys looked up by this process, by state folder (None: none to be had there)."""


def key_dir(env: Mapping[str, str] | None = None) -> str:
    """This user's state folder for vllm-cache-tools, as ``platformdirs.user_state_dir``
    gives it (``$XDG_STATE_HOME/vllm-cache-tools``, else ``~/.local/state/vllm-cache-tools``;
    macOS: ``~/Library/Application Support/vllm-cache-tools``)."""
    env = os.environ if env is None else env
    if sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Application Support")
    else:
        xdg = env.get("XDG_STATE_HOME", "").strip()
        base = xdg if os.path.isabs(xdg) else os.path.expanduser("~/.local/state")
    return os.path.join(base, "vllm-cache-tools")


def _cache_roots(env: Mapping[str, str]) -> list[str]:
    """vLLM cache roots this process may share with other users (the key never goes there)."""
    roots = []
    if env.get("VLLM_CACHE_ROOT"):
        roots.append(os.path.expanduser(env["VLLM_CACHE_ROOT"]))
    if env.get("XDG_CACHE_HOME"):
        roots.append(os.path.join(env["XDG_CACHE_HOME"], "vllm"))
    roots.append(os.path.expanduser("~/.cache/vllm"))
    return [os.path.realpath(r) for r in roots]


def _inside(path: str, roots: Iterable[str]) -> bool:
    p = os.path.realpath(path)
    return any(p == r or p.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def _private_dir(path: str) -> int | None:
    """An fd on ``path`` (created 0700 if missing) when it is a real folder of this user that
    nobody else can write; else None."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(fd)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        os.close(fd)
        return None
    return fd


def _read_key(dfd: int) -> bytes | None:
    """The key file's bytes when it is this user's regular 0600 file of the right size;
    raises FileNotFoundError when there is none."""
    fd = os.open(KEY_FILENAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=dfd)
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid()
                or st.st_mode & 0o077 or st.st_size != KEY_BYTES):
            return None
        data = os.read(fd, KEY_BYTES + 1)
        return data if len(data) == KEY_BYTES else None
    finally:
        os.close(fd)


def _create_key(dfd: int) -> bytes | None:
    """Write a fresh key under a private temporary name, then link it into place: readers see
    no key or a whole one, and of two processes creating it at once, the first link wins."""
    key = os.urandom(KEY_BYTES)
    tmp = f".{KEY_FILENAME}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=dfd)
    try:
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, key)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, KEY_FILENAME, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
        except FileExistsError:
            return _read_key(dfd)  # another process made it first: use theirs
        return key
    finally:
        os.unlink(tmp, dir_fd=dfd)


def load_key(env: Mapping[str, str] | None = None, create: bool = True) -> bytes | None:
    """This user's digest key (made on first use), or None when it cannot be had safely: the
    state folder is not the user's own private folder, lies inside a vLLM cache root, the key
    file is a link, someone else's, readable by others or damaged."""
    env = os.environ if env is None else env
    d = key_dir(env)
    if _inside(d, _cache_roots(env)):
        return None
    dfd = _private_dir(d)
    if dfd is None:
        return None
    try:
        try:
            return _read_key(dfd)
        except FileNotFoundError:
            return _create_key(dfd) if create else None
    except OSError:
        return None
    finally:
        os.close(dfd)


def _key() -> bytes | None:
    d = key_dir()  # looked up each time: a process (a test) may change XDG_STATE_HOME
    if d not in _KEYS:
        _KEYS[d] = load_key()
    return _KEYS[d]


def reset_key_cache() -> None:
    """Forget the keys this process looked up (tests)."""
    _KEYS.clear()


def digest(value: Any, key: bytes | None = None) -> str | None:
    """The keyed digest shown for ``value`` (12 hex digits), or None without a key."""
    key = _key() if key is None else key
    if key is None:
        return None
    # Imported here: most JSON documents hide nothing, and hashlib loads OpenSSL (~3-4 ms of
    # an indexed ls --json).
    import hashlib
    import hmac

    data = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return hmac.new(key, data.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:12]


def marker(value: Any) -> str:
    """What a hidden value is replaced by."""
    d = digest(value)
    return REDACTED if d is None else f"<redacted:{d}>"


_MARKER = re.compile(r"<redacted(?::[0-9a-f]{12}| sha256:[0-9a-f]{6,64}|: [^<>]*)?>")


def is_redacted(value: Any) -> bool:
    """Whether ``value`` is a whole marker (this one's, or an older ``<redacted sha256:…>``):
    ``<redacted:…>-tail`` is not (the tail is still shown text)."""
    return isinstance(value, str) and _MARKER.fullmatch(value) is not None


# --- values ---------------------------------------------------------------------------------

_NAME_FIELDS = ("item", "name", "field", "var", "variable", "flag", "env", "key")
"""Fields that name the value beside them (``{"item": "HF_TOKEN", "old": .., "new": ..}``)."""
_VALUE_FIELDS = frozenset({"old", "new", "value", "values", "default", "before", "after",
                           "live", "recorded", "raw", "current", "predicted"})


def redact_value(name: str | None, value: Any, depth: int = 0) -> Any:
    """``value`` (a JSON-like value found under ``name``) with every secret replaced; the
    input is not changed. Under a secret name: strings, numbers and whole dicts are hidden,
    lists item by item, ``None``, booleans and ``""`` kept (they tell "unset" / "use the
    login token", not a secret). Elsewhere: dict items by their own names, ``name/old/new``
    records by the name they carry, lists of command-line words as a command line, strings
    by :func:`redact_string`."""
    if value is None or isinstance(value, bool):
        return value
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if name and is_secret_name(name):
        if isinstance(value, (list, tuple)):
            return [redact_value(name, v, depth + 1) for v in value]
        if value == "" or is_redacted(value):
            return value
        return marker(value)
    if isinstance(value, Mapping):
        return _redact_mapping(value, depth)
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, str) and v.startswith("-") for v in value) and all(
                isinstance(v, str) for v in value):
            return redact_argv(value)
        return [redact_value(name, v, depth + 1) for v in value]
    if isinstance(value, str):
        return redact_string(value, depth)
    return value


def _redact_mapping(value: Mapping[Any, Any], depth: int) -> dict[Any, Any]:
    named = next((value[f] for f in _NAME_FIELDS if isinstance(value.get(f), str)
                  and is_secret_name(value[f])), None)
    out: dict[Any, Any] = {}
    for k, v in value.items():
        ks = str(k)
        if named is not None and ks in _VALUE_FIELDS:
            out[k] = redact_value(named, v, depth + 1)
        else:
            key = redact_string(k, depth) if isinstance(k, str) else k
            out[key] = redact_value(ks, v, depth + 1)
    return out


def redact_string(s: str, depth: int = 0) -> str:
    """A string with no name to go by: JSON text redacted inside (and written back compactly
    when something was hidden), anything else by :func:`redact_text`."""
    if not _may_hold_secret(s):
        return s
    t = s.strip()
    if t[:1] in ("{", "[") and len(t) <= MAX_JSON_TEXT:
        try:
            parsed = json.loads(t)
        except (ValueError, RecursionError):
            parsed = None
        if isinstance(parsed, (dict, list)):
            red = redact_value(None, parsed, depth + 1)
            return s if red == parsed else json.dumps(red, separators=(",", ":"))
    return redact_text(s)


def dumps(data: Any, **kwargs: Any) -> str:
    """``json.dumps(redact_value(None, data), **kwargs)``, fast when nothing is to be hidden:
    the distinct strings of the payload (names and values) are looked at once, together, and
    only one that could name or hold a secret (:func:`_may_hold_secret`) sends the whole
    payload through :func:`redact_value`."""
    if not _clean(data):
        data = redact_value(None, data)
    return json.dumps(data, **kwargs)


def is_clean(data: Any) -> bool:
    """Whether :func:`redact_value` would leave ``data`` (a JSON-like value) as it is: no
    string of it names a secret or holds one (the test :func:`dumps` makes)."""
    return _clean(data)


def _clean(data: Any) -> bool:
    """Whether no string of ``data`` (a JSON-like value) names a secret or has one that
    :func:`redact_string` would hide."""
    seen: set[Any] = set()
    stack = [data]
    add, update, push, pop = seen.add, seen.update, stack.append, stack.pop
    while stack:  # exact types inline: this walk is most of the cost of a large ls --json
        x = pop()
        t = type(x)
        if t is dict:
            update(x)
            values: Iterable[Any] = x.values()
        elif t is list or t is tuple:
            values = x
        elif isinstance(x, Mapping):
            update(x)
            values = x.values()
        elif isinstance(x, (list, tuple)):
            values = x
        else:
            if isinstance(x, str):
                add(str(x))
            continue
        for v in values:
            tv = type(v)
            if tv is str:
                add(v)
            elif tv is not int and tv is not float and v is not None and tv is not bool:
                push(v)
    strings: list[str] = [w for w in seen if type(w) is str]
    joined = "\x00".join(strings)
    if not joined.isascii():  # lower() may change lengths: look at each string
        return not any(is_secret_name(w) or redact_string(w) != w for w in strings)
    starts = list(itertools.accumulate((len(w) + 1 for w in strings), initial=0))
    judged: set[int] = set()
    for m in _HINT.finditer(joined.lower()):
        i = bisect.bisect_right(starts, m.start()) - 1
        if i in judged:
            continue
        judged.add(i)
        w = strings[i]
        if is_secret_name(w) or redact_string(w) != w:
            return False
    return True


def same_value(name: str, a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` under ``name`` are the same value, when either may already be
    redacted (vLLM's own ``cache_key_factors.json`` holds a secret in clear; a manifest or the
    probe holds its digest)."""
    return bool(a == b or redact_value(name, a) == redact_value(name, b))


def redact_env(env: Mapping[str, Any]) -> dict[str, Any]:
    """An environment (or ``compile_factors()``) mapping with secret variables hidden and
    credentials inside other values (``http://user:pass@proxy``) too."""
    return {k: redact_value(str(k), v) for k, v in env.items()}


# --- command lines --------------------------------------------------------------------------

FLAG_KINDS: dict[str, str] = {
    # vLLM's secret-named flags and how many values each takes (``vllm serve --help`` of
    # 0.15-0.33; checked against vLLM's own parser by tests/test_redaction.py). "multi":
    # nargs="+", every value up to the next flag; "optional": nargs="?"; "bool": no value.
    "--api-key": "multi",
    "--hf-token": "optional",
    "--allow-credentials": "bool", "--no-allow-credentials": "bool",
}
"""Secret-named flags whose arity is not "one value". Flags whose names are not secret need
no entry: their values are scanned for secrets whatever they are."""
_BOOL_PREFIXES = frozenset({"enable", "disable", "no", "allow", "use", "skip", "trust"})


def flag_kinds(parser: Any) -> dict[str, str]:
    """``{option string: "bool" | "one" | "optional" | "multi"}`` read from an ``argparse``
    parser (vLLM's, where it is at hand), in :data:`FLAG_KINDS`'s terms."""
    out: dict[str, str] = {}
    for action in getattr(parser, "_actions", ()):
        nargs = action.nargs
        kind = ("bool" if nargs == 0 else "optional" if nargs == "?" else
                "multi" if nargs in ("+", "*") or (isinstance(nargs, int) and nargs > 1)
                else "one")
        for opt in action.option_strings:
            out[opt] = kind
    return out


def _flag_name(flag: str) -> str:
    head, _, tail = flag.partition(".")  # vLLM's --json-arg.key=value form
    return head.replace("_", "-") + ("." + tail if tail else "")


def _flag_kind(flag: str, kinds: Mapping[str, str]) -> str:
    base = _flag_name(flag).split(".", 1)[0]
    if base in kinds:
        return kinds[base]
    words = name_words(base)
    if words and words[0] in _BOOL_PREFIXES:
        return "bool"  # an unknown --enable-x / --no-x switch takes no value
    return "maybe"  # unknown: hide the next word unless it is a flag


def _is_flag(arg: str) -> bool:
    if len(arg) < 2 or not arg.startswith("-"):
        return False
    try:
        float(arg)
        return False  # a negative number
    except ValueError:
        return True


def _secret_flag(flag: str) -> bool:
    return any(is_secret_name(part) for part in _flag_name(flag).lstrip("-").split("."))


def redact_argv(argv: Sequence[str], kinds: Mapping[str, str] | None = None) -> list[str]:
    """A command line with the values of secret-named flags hidden (``--api-key K1 K2``,
    ``--hf-token=T``, ``--kv-transfer-config.api_key=K``), secrets inside other values hidden
    too (JSON values such as ``--kv-transfer-config '{..."api_key": ...}'``, URLs with
    ``user:pass@``, ``hf_...`` tokens), and everything else -- ``--tokenizer``,
    ``--max-num-batched-tokens 8192``, a model after ``--enable-prefix-caching`` -- kept.
    ``kinds``: flag arities (default :data:`FLAG_KINDS`, or :func:`flag_kinds` of vLLM's
    parser)."""
    kinds = FLAG_KINDS if kinds is None else kinds
    out: list[str] = []
    hide = ""  # "one": the next word; "maybe": the next unless a flag; "multi": up to a flag
    positional_only = False
    for arg in argv:
        if not isinstance(arg, str):
            out.append(redact_value(None, arg))
            continue
        if hide:
            if hide == "one" or not _is_flag(arg):
                out.append(arg if arg == "" or is_redacted(arg) else marker(arg))
                hide = "multi" if hide == "multi" else ""
                continue
            hide = ""
        if arg == "--" and not positional_only:
            positional_only = True
            out.append(arg)
            continue
        if positional_only or not _is_flag(arg):
            out.append(redact_string(arg))
            continue
        flag, eq, value = arg.partition("=")
        if _secret_flag(flag):
            if eq:
                hidden = value if value == "" or is_redacted(value) else marker(value)
                out.append(f"{flag}={hidden}")
            else:
                out.append(arg)
                kind = _flag_kind(flag, kinds)
                hide = {"one": "one", "maybe": "maybe", "optional": "maybe",
                        "multi": "multi"}.get(kind, "")
            continue
        out.append(f"{flag}={redact_string(value)}" if eq else redact_string(arg))
    return out


# --- free text ------------------------------------------------------------------------------

_HINT = re.compile(
    r"token|key|secret|pass|auth|cred|cookie|bearer|basic|session|private|xsrf|@|hf_|sk[-_]"
    r"|gh[pousr]_|github_pat|glpat|akia|asia|xox|aiza|eyj")
"""Cheap test on the lower-cased text (a case-blind pattern is ~9x slower): a string without
any of these holds no secret this module can find."""


def _may_hold_secret(text: str) -> bool:
    return _HINT.search(text.lower()) is not None


def may_hold_secret(text: str) -> bool:
    """Whether :func:`redact_string` may change ``text`` (a cheap test: ``False`` means it
    leaves it as it is). Texts joined by newlines may be tested at once: no hint spans one."""
    return _may_hold_secret(text)


_URL_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/\s@'\"<>]{1,256})@")
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{20,}"
    r"|sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}|sk_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}|glpat-[A-Za-z0-9_-]{20,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}"
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"
    r")(?![A-Za-z0-9_])")
"""Credentials recognisable by their shape alone (Hugging Face, OpenAI / Anthropic, Stripe,
GitHub, GitLab, AWS key ids, Slack, Google, JWTs)."""
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>[Bb]earer)\s+"
                          r"(?P<cred>(?!<redacted)[A-Za-z0-9._~+/=:-]{8,})")
_ASSIGN = re.compile(
    # Not after "/": a path's last part named like a secret ("/etc/passwd: ...") is no name.
    r"(?<![A-Za-z0-9_./-])(?P<q>['\"]?)(?P<name>(?:--?)?[A-Za-z_][A-Za-z0-9_.-]*)(?P=q)"
    r"(?P<sep>[ \t]*[:=][ \t]*|[ \t]+(?=['\"{\[])|['\"]?,[ \t]*(?=['\"{\[])"
    r"|[ \t]+(?:changed[ \t]+from|changed|from)[ \t]+"
    r"(?=(?:'[^'\n]{0,512}'|\"[^\"\n]{0,512}\"|[{\[(][^\n]{0,512}?[}\])]|\S{1,512})"
    r"[ \t]*->))")
"""A name followed by ``=``, ``:``, a space before a quoted or bracketed value, ``', '`` (a
command line printed as a list, a ``(name, value)`` pair), or ``changed`` before ``A -> B``."""
_FLAG_SPACE = re.compile(r"(?<![\w-])(?P<q>)(?P<name>--?[A-Za-z][A-Za-z0-9_.-]*)(?P<sep>[ \t]+)"
                         r"(?=[^\s-])")
_ARROW = re.compile(r"[ \t]*->[ \t]*")
_NEXT_WORD = re.compile(r"(?:['\"]?,[ \t]*|[ \t]+)(?=['\"]?[^\s'\"-])")
_PLAIN = frozenset({"None", "null", "True", "False", "true", "false", "-", "<unset>"})
_UNQUOTED_END = re.compile(r"[\s,;'\"}\])&]")
_AUTH_WORDS = frozenset({"bearer", "basic", "digest", "token"})


def _value_end(text: str, i: int) -> int:
    """The end of the value starting at ``i``: a quoted string (its closing quote may be cut
    off), a bracketed literal, or a bare word."""
    if i >= len(text):
        return i
    c = text[i]
    if c in "'\"":
        j = i + 1
        while j < len(text):
            if text[j] == "\\":
                j += 2
                continue
            if text[j] == c:
                return j + 1
            j += 1
        return len(text)
    if c in "{[(":
        depth, j, quote = 0, i, ""
        while j < len(text):
            ch = text[j]
            if quote:
                if ch == "\\":
                    j += 1
                elif ch == quote:
                    quote = ""
            elif ch in "'\"":
                quote = ch
            elif ch in "{[(":
                depth += 1
            elif ch in "}])":
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return len(text)
    m = _UNQUOTED_END.search(text, i)
    end = m.start() if m else len(text)
    word = text[i:end]
    if word.lower() in _AUTH_WORDS:  # "Authorization: Bearer abc": the credential too
        m2 = re.match(r"[ \t]+[^\s,;'\"}\])&]+", text[end:])
        if m2:
            end += m2.end()
    return end


def _hide(text: str, json_context: bool = False) -> str:
    """What a value found in text is replaced by (the quotes it had are kept; in JSON text a
    bare value becomes a JSON string, so the output still parses)."""
    if text in _PLAIN or is_redacted(text.strip("'\"")):
        return text
    if len(text) >= 2 and text[0] in "'\"" and text[-1] == text[0]:
        inner = text[1:-1]
        return text if inner == "" or inner in _PLAIN else f"{text[0]}{marker(inner)}{text[0]}"
    return f'"{marker(text)}"' if json_context else marker(text)


def _redact_assignments(text: str, pattern: re.Pattern[str]) -> str:
    out: list[str] = []
    pos = 0
    i = 0
    while True:
        m = pattern.search(text, i)
        if m is None:
            break
        name = m.group("name")
        bare = name.lstrip("-")
        flag, sep = name.startswith("-"), m.group("sep").strip()
        pair = m.group("q") and text[max(0, m.start() - 1):m.start()] == "("
        if not (is_secret_name(bare) or (flag and _secret_flag(name))) or (
                flag and not sep and _flag_kind(name, FLAG_KINDS) == "bool") or (
                "," in sep and not flag and not pair):  # names listed, not a name and value
            i = m.start() + max(1, len(m.group("q")) + len(name))
            continue
        start = m.end()
        end = _value_end(text, start)
        if end == start:
            i = m.end()
            continue
        json_context = m.group("q") == '"'
        out.append(text[pos:start])
        out.append(_hide(text[start:end], json_context))
        pos = end
        more = _ARROW if not (flag and _flag_kind(name, FLAG_KINDS) == "multi") else _NEXT_WORD
        while True:  # "HF_TOKEN: 'a' -> 'b'", "--api-key k1 k2": every value
            a = more.match(text, pos)
            if a is None:
                break
            vend = _value_end(text, a.end())
            if vend == a.end():
                break
            out.append(text[pos:a.end()])
            out.append(_hide(text[a.end():vend], json_context))
            pos = vend
        i = pos
    out.append(text[pos:])
    return "".join(out)


RECORD_SCAN = 4096
"""How far past a secret's name (``"name": "HF_TOKEN"``) its record's value fields are looked
for in JSON text."""
_JSON_NAMED = re.compile(r'"(?:item|name|field|var|variable|flag|env|key)"[ \t]*:[ \t]*'
                         r'"(?P<n>(?:[^"\\\n]|\\.)*)"')
_JSON_VALUE_FIELD = re.compile(r'"(?:old|new|value|values|default|before|after|live|recorded'
                               r'|raw|current|predicted)"\s*:\s*')


def _redact_json_records(text: str) -> str:
    """JSON text: in an object that names a secret (``{"name": "HF_TOKEN", "old": .., "new":
    ..}``, :data:`_NAME_FIELDS`), the value fields that follow the name."""
    out: list[str] = []
    pos = scanned = 0
    for m in _JSON_NAMED.finditer(text):
        if m.start() < max(pos, scanned) or not is_secret_name(m.group("n")):
            continue
        # The record's own fields follow its name closely: a bounded look keeps this linear.
        i, depth, end_scan = m.end(), 0, min(len(text), m.end() + RECORD_SCAN)
        while i < end_scan:
            c = text[i]
            if c == '"':
                v = _JSON_VALUE_FIELD.match(text, i) if depth == 0 else None
                if v is None:
                    i = _value_end(text, i)
                    continue
                end = _value_end(text, v.end())
                out += [text[pos:v.end()], _hide(text[v.end():end], json_context=True)]
                pos = i = end
                continue
            if c in "{[":
                depth += 1
            elif c in "}]":
                if depth == 0:
                    break
                depth -= 1
            i += 1
        scanned = i
    out.append(text[pos:])
    return "".join(out)


def redact_text(text: str) -> str:
    """Free text (a log line, a printed table row, a Python repr) with secrets hidden:
    ``user:pass@`` in URLs, token shapes, ``Bearer``/``Basic`` credentials, and the values of
    secret names written as ``NAME=v``, ``NAME: v``, ``'name': 'v'``, ``name='v'``,
    ``--flag v``, ``'--flag', 'v'``, ``NAME 'a' -> 'b'``."""
    if not text or not _may_hold_secret(text):
        return text
    text = _URL_USERINFO.sub(
        lambda m: m.group(0) if is_redacted(m.group("info"))
        else f"{m.group('scheme')}{marker(m.group('info'))}@", text)
    text = _TOKEN_SHAPES.sub(lambda m: marker(m.group(0)), text)
    text = _AUTH_SCHEME.sub(lambda m: f"{m.group('scheme')} {marker(m.group('cred'))}", text)
    text = _redact_assignments(text, _ASSIGN)
    text = _redact_json_records(text)
    return _redact_assignments(text, _FLAG_SPACE)


__all__ = ["FLAG_KINDS", "REDACTED", "digest", "dumps", "flag_kinds", "is_redacted",
           "is_secret_name", "key_dir", "load_key", "marker", "name_words", "redact_argv",
           "redact_env", "redact_string", "redact_text", "redact_value", "reset_key_cache",
           "same_value"]
