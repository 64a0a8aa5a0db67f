"""Analyses over what the readers and the store return: pure functions from records to
records, no printing (the CLI renders them).

* :mod:`.inputs` -- what a fleet analysis reads: one cache root (every host's ledger in a
  shared root), a folder of collected roots, ledgers and manifests, or a remote store;
* :mod:`.stats` -- hit statistics from the recorder's ledgers (``vllm-cache stats``);
* :mod:`.drift` -- factors that split one model's cache across starts (``vllm-cache drift``).

The architecture issue moves predict, explain and audit here as well."""
