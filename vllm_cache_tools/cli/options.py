"""Typer options that several verbs share, word for word (their help is in docs/cli.md).
Only typer is imported here: ``ls`` and ``stats`` take ``--root`` and ``-o`` without
importing the fleet's output helpers (:mod:`.fleetcommon` re-exports these)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# --root of every verb that takes a cache root.
RootOpt = Annotated[Path | None, typer.Option(
    "--root", help="vLLM cache root (default: $VLLM_CACHE_ROOT, else $XDG_CACHE_HOME/vllm, "
    "else ~/.cache/vllm); its torch_compile_cache folder is accepted too.",
    show_default=False, readable=False, resolve_path=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]
PythonOpt = Annotated[str | None, typer.Option(
    "--python", help="Interpreter of the environment that runs vLLM here (default: this "
    "one): the checks and the hit prediction run there.")]
UsageOpt = Annotated[str, typer.Option(
    "--usage", help="serve (vllm serve defaults) or llm (offline LLM class defaults).")]
JobsOpt = Annotated[int, typer.Option("--jobs", "-j", help="Parallel transfers.", min=1,
                                      max=256)]
StorageOpt = Annotated[list[str] | None, typer.Option(
    "--storage-option", "-o", help="fsspec storage option KEY=VALUE (repeatable), e.g. "
    "-o anon=true; credentials are better left to AWS_* variables or ~/.aws. oci://: "
    "-o plain_http=true reaches a registry that is not on loopback over plain HTTP "
    "(credentials then travel in clear).")]
SignOpt = Annotated[Path | None, typer.Option(
    "--sign", metavar="KEYFILE", help="Sign with this OpenSSH ed25519 private key (ssh-keygen "
    "-t ed25519, no passphrase): SSHSIG signatures in the namespace vllm-cache, which "
    "ssh-keygen -Y verify checks too; the signed part carries the provenance (host, user, "
    "time, versions, hardware, redacted serve arguments, tool version).",
    show_default=False, readable=False, resolve_path=False)]
TrustOpt = Annotated[Path | None, typer.Option(
    "--trust", metavar="ALLOWED_SIGNERS", help="Trust policy: an OpenSSH allowed_signers file "
    "(principals [options] ssh-ed25519 KEY; namespaces=, valid-after=, valid-before=); "
    "default $VLLM_CACHE_TOOLS_TRUST. With one, unsigned, untrusted, expired or tampered "
    "entries are refused (exit 1) and nothing of them placed.",
    show_default=False, readable=False, resolve_path=False)]
RequireSigOpt = Annotated[bool, typer.Option(
    "--require-signature", help="Refuse to run without a trust policy (--trust or "
    "$VLLM_CACHE_TOOLS_TRUST): exit 2.")]
