"""Every JIT cache a vLLM host grows, beside vLLM's own compile cache: where each one's owner
puts it (:mod:`.kinds`), how big and how old it is and, where its layout is understood, what
is in it (:mod:`.listing`)."""
