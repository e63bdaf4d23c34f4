"""The LLM client: any OpenAI-compatible endpoint through the ``openai`` package, JSON replies,
retries with backoff, and the call counters every LLM-backed component reports."""
