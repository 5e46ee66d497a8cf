"""kvtool: the operator's toolkit for vLLM with KV-cache offload."""

__version__ = "0.1.0"
