"""The wrong-hit guard's list: what vLLM leaves out of its cache key although it changes the
compiled graph (issue 29, item 3). Data only, standard library only: the recorder reads it
inside vLLM's processes (``recorder/guard.py``) through :mod:`.wrong_hit`.

A difference between a start and the manifest of the entry it is about to load counts only
when its item is listed here. Everything else ``audit`` may flag (``model_config.seed``,
declared variables vLLM ignores on purpose such as ``VLLM_HOST_IP``) changes no graph and is
left to ``audit``. Bump :data:`RULES_VERSION` on every change: ledger events carry it, so a
count can be read against the list that produced it."""

from __future__ import annotations

RULES_VERSION = 1

CONFIG_FIELDS: dict[str, str] = {
    # vllm#53366: SpeculativeConfig.compute_hash leaves these out in every release checked
    # (0.28.0-0.33.0, docs/recipes.md); the target model's graph is traced for
    # 1 + num_speculative_tokens query tokens per request and a stale entry crashed with a
    # size assertion.
    "speculative_config.num_speculative_tokens":
        "speculative tokens per step: the verified batch's shape (vllm#53366)",
    "speculative_config.num_speculative_tokens_per_batch_size":
        "speculative tokens per batch size: the verified batch's shapes",
    "speculative_config.method":
        "the proposer (ngram, eagle, mtp, ...): which graphs and hidden states are compiled",
    "speculative_config.parallel_drafting":
        "the drafter's batch layout",
    "speculative_config.disable_padded_drafter_batch":
        "the drafter's batch padding: the shapes it is compiled for",
}
"""``<sub_config>.<field>`` -> why it matters. Compared whenever the field differs, hashed
or not: at a hit a hashed field cannot differ (its key would), so a difference here is
always outside the key."""

UNDECLARED_ENV = "a VLLM_* variable vLLM does not declare: never in its key; forks read such " \
                 "switches in traced code (token drift reported)"
"""Every ``VLLM_*`` variable of the start that vLLM's ``envs`` does not declare
(the manifest's ``undeclared_env``), as ``audit`` flags them."""

INDUCTOR_OPTION = "an Inductor / functorch option: outside the key of a non-mega AOT entry"
"""Every option of the manifests' ``inductor.inductor_config`` / ``functorch_config``."""

VERSIONS: dict[str, str] = {
    "torch": "torch's version: the artifact's generated code and its runtime",
    "triton": "Triton's version: generated kernels",
}
"""``versions.<package>`` -> why (vLLM's own version is in both keys)."""
