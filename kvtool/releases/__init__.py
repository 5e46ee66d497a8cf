"""Per-release facts about vLLM, read from the generated tables in ``rules/releases/``."""
