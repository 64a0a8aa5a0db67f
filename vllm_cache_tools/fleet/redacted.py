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

from collections.abc import Iterable, Sequence
from typing import Any

from vllm_cache_tools.fleet.errors import Refused
from vllm_cache_tools.fleet.records import EntryRecord, entry_from_json, entry_json
from vllm_cache_tools.layout import is_manifest_name, short_key
from vllm_cache_tools.read.errors import ReadError
from vllm_cache_tools.read.manifest import read_manifest
from vllm_cache_tools.redaction import is_clean, redact_value


def redacted_record(rec: EntryRecord) -> EntryRecord:
    """``rec`` with every secret of its fields hidden (``rec`` itself when none is)."""
    d = entry_json(rec)
    if is_clean(d):
        return rec
    red = redact_value(None, d)
    return rec if red == d else entry_from_json(red)


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
                            files: Iterable[Sequence[Any]]) -> None:
    """Raise :class:`Refused` when a recorder manifest among the entries' ``files``
    (:class:`~vllm_cache_tools.fleet.selection.LocalFile`\\ s, per record) holds a secret
    in clear. A manifest that cannot be read is the readers' concern (it is carried as a
    file; ``show`` and ``audit`` report it), not a secret found."""
    for rec, fs in zip(records, files, strict=True):
        for lf in fs:
            if not is_manifest_name(lf.source.name):
                continue
            try:
                data = read_manifest(lf.source).data
            except ReadError:
                continue
            red = redact_value(None, data)
            if red != data:
                raise Refused(
                    f"entry {short_key(rec.key)}: the recorder manifest {lf.record.path} "
                    f"holds a secret in clear (in {_first_secret(data, red)}; written by an "
                    "older recorder or by hand), not packed or pushed: remove that file, or "
                    "record the start again with the current recorder")


__all__ = ["redacted_record", "refuse_secret_manifests"]
