"""What leaves this host in a bundle or a store holds no secret in clear.

An entry's record (the bundle manifest's entry, a store's index object) is built from what
vLLM and the recorder wrote: the served model (``https://user:PASSWORD@host/m``), the env
factors of ``cache_key_factors.json``, the traced files' paths. :func:`redacted_record` hides
every secret there by the one rule of :mod:`vllm_cache_tools.redaction` (the one ``ls --json``
applies), before the record is written anywhere or compared with a store's copy.

The recorder's own manifests travel as files of their entry, byte for byte (their digests are
the bundle's and the store's); the recorder redacts them as it writes them, but one written
by an older recorder, or by hand, may not be. :func:`refuse_secret_manifests` reads each one
about to travel and refuses the selection, naming the file and the field, when the rule would
hide something in it: rewriting it would change the entry's files under their recorded
digests."""

from __future__ import annotations

import hashlib
import marshal
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vllm_cache_tools.fleet.errors import FleetError, Refused
from vllm_cache_tools.fleet.records import EntryRecord, entry_from_json, entry_json, file_json
from vllm_cache_tools.layout import is_manifest_name, short_key
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import MAX_MANIFEST_BYTES, Manifest, manifest_from_bytes
from vllm_cache_tools.read.noatime import read_noatime
from vllm_cache_tools.redaction import (
    MAX_DEPTH,
    is_clean,
    is_secret_name,
    may_hold_secret,
    redact_string,
    redact_value,
)

if TYPE_CHECKING:
    from vllm_cache_tools.fleet.selection import LocalFile

Seen = dict[tuple[str, bytes], Any]
"""Field values already redacted in one selection, by (depth and field name, the value's
``marshal`` bytes): the starts of
one host share most of what is written about them (the env factors, the compiler config in
the manifests), and redacting those ~60 KB per entry was most of a first pack."""


FIELD_LEVELS = 3
"""How many levels of dicts :func:`redact_fields` goes down before it redacts (and memoizes)
a value whole: a manifest differs from its neighbour start's in a few values (its time, its
pid, its config hash), the record that carries it in those too."""


RECORD_DEPTH = 2
"""The depth at which an entry's record sits in a bundle manifest (``entries[i]``), where
:func:`redact_document` redacts it: a record redacted there by :func:`redacted_record` is
what the manifest's redaction leaves of it (redaction hides values nested too deep)."""


def redact_fields(data: Any, seen: Seen | None = None, depth: int = 0) -> Any:
    """``redact_value(None, data)``, a dict field by field (:data:`FIELD_LEVELS` levels
    down), each value below redacted once per distinct value in ``seen``. The same result:
    a dict's fields are redacted one by one by their own names, except the values beside a
    field that names a secret (``{"name": "HF_TOKEN", "value": ...}``) and everything under
    a secret name: those are redacted whole, as :func:`redact_value` does."""
    if seen is None:
        return redact_value(None, data, depth)
    if isinstance(data, dict):  # a whole record or manifest: each differs, its fields repeat
        return _record_fields(data, seen, depth)
    return _fields(None, data, seen, depth, FIELD_LEVELS)


def _fields(name: str | None, value: Any, seen: Seen, depth: int, levels: int) -> Any:
    if not isinstance(value, (dict, list)):
        return redact_value(name, value, depth)
    if name == "files" and _plain_files(value, seen, depth):
        return value
    try:
        # marshal (format 2: no back-references, so equal values give equal bytes) is a
        # third of json.dumps' cost; equal bytes load as equal values, so a hit is exact.
        memo_key: tuple[str, bytes] | None = (f"{depth}:{name}", marshal.dumps(value, 2))
    except (TypeError, ValueError):  # not plain data: no memo
        memo_key = None
    if memo_key is not None and memo_key in seen:
        return seen[memo_key]
    if levels == 0 or not isinstance(value, dict) or (name and is_secret_name(name)) or any(
            isinstance(v, str) and is_secret_name(v) for v in value.values()):
        red = redact_value(name, value, depth)
    else:
        red = {(redact_string(k, depth) if isinstance(k, str) else k):
               _fields(str(k), v, seen, depth + 1, levels - 1) for k, v in value.items()}
    if memo_key is not None:
        seen[memo_key] = red
    return red


_FILE_FIELDS: dict[str, type] = {"path": str, "size": int, "sha256": str, "executable": bool}


def _plain_files(value: Any, seen: Seen, depth: int) -> bool:
    """Whether ``value`` (at ``depth``) is a record's list of files (:class:`.records.
    FileRecord` fields: texts, whole numbers, booleans, under names that name no secret)
    whose texts redaction leaves as they are: then it leaves the list as it is. Each text is
    tested cheaply (:func:`~vllm_cache_tools.redaction.may_hold_secret`), the few that may
    hold one (``cache_key_factors.json``) redacted once per selection (``seen``): walking a
    record's ~25 files one by one was half of a first pack's redaction."""
    if not isinstance(value, list) or depth + 2 > MAX_DEPTH:
        return False
    for f in value:
        if type(f) is not dict:
            return False
        for k, v in f.items():
            kind = _FILE_FIELDS.get(k)
            if kind is None or type(v) is not kind:
                return False
            if isinstance(v, str) and may_hold_secret(v):
                memo = (f"{depth + 2}:file text", v.encode("utf-8", "surrogatepass"))
                same = seen.get(memo)
                if same is None:
                    same = seen[memo] = redact_string(v, depth + 2) == v
                if not same:
                    return False
    return True


def redact_document(data: Any, seen: Seen | None = None) -> Any:
    """``redact_value(None, data)`` for a document of records (a bundle manifest: top-level
    fields, and lists of records such as ``entries``): each record by :func:`redact_fields`
    with one ``seen`` shared by all of them, so what the starts of one host have in common
    (their env factors, the recorder's compiler config: ~50 KB a record) is redacted once,
    not once per record. The same result as :func:`redact_value` (a document whose top-level
    strings name a secret is redacted whole, as :func:`redact_value` treats the values beside
    such a name)."""
    if not isinstance(data, dict) or any(isinstance(v, str) and is_secret_name(v)
                                         for v in data.values()):
        return redact_value(None, data)
    seen = {} if seen is None else seen
    out: dict[Any, Any] = {}
    for k, v in data.items():
        key = redact_string(k) if isinstance(k, str) else k
        name = str(k)
        if isinstance(v, list) and v and all(isinstance(x, dict) for x in v) \
                and not is_secret_name(name):
            out[key] = [_record_fields(x, seen, 2) for x in v]
        else:
            out[key] = redact_value(name, v, 1)
    return out


def _record_fields(rec: dict[Any, Any], seen: Seen, depth: int) -> Any:
    """:func:`_fields` of one record at ``depth``, without the memo of the record whole:
    records differ (each names its own entry, each manifest its own start), their fields
    repeat; the memo key of each whole record was most of the cost."""
    if any(isinstance(v, str) and is_secret_name(v) for v in rec.values()):
        return redact_value(None, rec, depth)
    return {(redact_string(k, depth) if isinstance(k, str) else k):
            _fields(str(k), v, seen, depth + 1, FIELD_LEVELS - 1) for k, v in rec.items()}


def redacted_record(rec: EntryRecord, seen: Seen | None = None,
                    depth: int = 0) -> EntryRecord:
    """``rec`` with every secret of its fields hidden (``rec`` itself when none is);
    ``seen``: the field values redacted before, shared by the records of one selection;
    ``depth``: where the record sits in the document it is written to
    (:data:`RECORD_DEPTH` in a bundle manifest)."""
    d = entry_json(rec)
    if seen is None and is_clean(d):
        return rec
    red = redact_fields(d, seen, depth)
    return rec if red == d else entry_from_json(red)


def files_clean(rec: EntryRecord, seen: Seen, depth: int = 0) -> bool:
    """Whether :func:`redacted_record` (at ``depth``, with ``seen``) leaves ``rec``'s
    ``files`` field as it is: what it does there, by that field's own name (a record is
    redacted field by field, and ``files`` is a list, never a value that names a secret)."""
    files = [file_json(f) for f in rec.files]
    return bool(_fields("files", files, seen, depth + 1, FIELD_LEVELS - 1) == files)


def linked_clean(rec: EntryRecord, depth: int = 0) -> bool:
    """Whether :func:`redacted_record` (at ``depth``) leaves ``rec``'s ``linked`` field as
    it is: what it does to a record whose other fields are known clean (a record is redacted
    field by field, each by its own name, and ``linked`` is a list, never a value that names
    a secret)."""
    linked = list(rec.linked)
    return bool(redact_value("linked", linked, depth + 1) == linked)


def document_without_secrets(data: dict[str, Any], clean: str) -> dict[str, Any] | None:
    """:func:`redact_document` of ``data`` whose list of records ``data[clean]`` is known to
    be left as it is there (each record redacted at :data:`RECORD_DEPTH` before, unchanged):
    only the other fields are checked; ``None`` where a top-level value names a secret (then
    the document is redacted whole: call :func:`redact_document`)."""
    rest = {k: v for k, v in data.items() if k != clean}
    if any(isinstance(v, str) and is_secret_name(v) for v in rest.values()):
        return None
    if not is_clean(rest):
        rest = redact_document(rest)
    return {**rest, clean: data[clean]}


def _first_secret(data: Any, red: Any, where: str = "") -> str:
    """The path of the first field ``redact_value`` changed (``env.HF_TOKEN``)."""
    if isinstance(data, dict) and isinstance(red, dict):
        for (k, v), (_, rv) in zip(data.items(), red.items(), strict=False):
            if v != rv:
                return _first_secret(v, rv, f"{where}.{k}" if where else str(k))
    if isinstance(data, list) and isinstance(red, list):
        for i, (v, rv) in enumerate(zip(data, red, strict=False)):
            if v != rv:
                return _first_secret(v, rv, f"{where}[{i}]")
    return where or "(top level)"


def refuse_secret_manifests(records: Sequence[EntryRecord],
                            files: Iterable[Sequence[LocalFile]], seen: Seen | None = None,
                            parsed: Mapping[str, Manifest] | None = None,
                            carried: Mapping[str, bytes] | None = None,
                            checked: Mapping[str, str] | None = None) -> None:
    """Raise :class:`Refused` when a recorder manifest among the entries' ``files``
    (:class:`~vllm_cache_tools.fleet.selection.LocalFile`\\ s, per record) holds a secret
    in clear. A manifest that does not parse is the readers' concern (it is carried as a
    file; ``show`` and ``audit`` report it), not a secret found; one over
    :data:`~vllm_cache_tools.read.manifest.MAX_MANIFEST_BYTES` is not read by them either.
    ``seen``: field values redacted before (:func:`redact_fields`); a manifest of the same
    digest is read once. What is checked is what is carried: ``carried``, the bytes a pack
    archived, by path (:attr:`.frames.Framed.manifests`); ``parsed``, manifests already read
    (the deep read's), each taken only where the bytes it was parsed from are the ones carried
    (its sha256 is the record's); else the file, read again, must still be those bytes
    (:class:`FleetError` where it changed or cannot be read: never checked in a new form,
    never skipped). ``checked``: manifests already found clean where they were read, path ->
    sha256 of the bytes checked, each taken as ``parsed`` is."""
    clean: set[str] = set()
    for rec, fs in zip(records, files, strict=True):
        for lf in fs:
            if not is_manifest_name(os.path.basename(lf.source)) or lf.record.sha256 in clean:
                continue
            if checked is not None and checked.get(os.fspath(lf.source)) == lf.record.sha256:
                clean.add(lf.record.sha256)
                continue
            m = parsed.get(os.fspath(lf.source)) if parsed is not None else None
            data = m.data if m is not None and m.sha256 == lf.record.sha256 else None
            if data is None:
                raw = carried.get(lf.source) if carried is not None else None
                if raw is None:
                    raw = _reread(rec, lf)
                if raw is None:
                    continue
                try:
                    data = manifest_from_bytes(raw, Path(lf.source)).data
                except ReadError:
                    continue
            red = redact_fields(data, seen)
            if red != data:
                raise Refused(
                    f"entry {short_key(rec.key)}: the recorder manifest {lf.record.path} "
                    f"holds a secret in clear (in {_first_secret(data, red)}; written by an "
                    "older recorder or by hand), not packed or pushed: remove that file, or "
                    "record the start again with the current recorder")
            clean.add(lf.record.sha256)


def _reread(rec: EntryRecord, lf: LocalFile) -> bytes | None:
    """The manifest's bytes read again, which must be the ones hashed; ``None`` for one
    over the readers' bound (not checked, as they do not read it)."""
    try:
        raw = read_noatime(lf.source, MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise FleetError(f"entry {short_key(rec.key)}: cannot read the recorder manifest "
                         f"{lf.record.path} to check it for secrets: {exc.strerror or exc}: "
                         "not packed or pushed") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        return None
    if hashlib.sha256(raw).hexdigest() != lf.record.sha256:
        raise FleetError(f"{lf.record.path} of entry {short_key(rec.key)} changed while it "
                         "was packed (being written?): run again")
    return raw


__all__ = ["FIELD_LEVELS", "RECORD_DEPTH", "Seen", "document_without_secrets", "files_clean",
           "linked_clean",
           "redact_document", "redact_fields", "redacted_record", "refuse_secret_manifests"]
