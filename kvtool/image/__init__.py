"""kvtool inspect-image: which KV connectors a vLLM image bundles."""
