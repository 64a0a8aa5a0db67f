"""Code that runs inside the user's vLLM environment (imports vLLM and torch). Kept apart so
the inspector never imports it; :mod:`.probe` is also runnable by path in a foreign env."""
