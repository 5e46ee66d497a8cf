"""kvtool size: KV-cache bytes per token and offload tier sizing."""
