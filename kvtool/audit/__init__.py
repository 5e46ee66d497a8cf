"""kvtool audit: lint a vLLM serve configuration against a target vLLM release."""
