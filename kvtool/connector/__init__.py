"""kvtool's reference lazy-offload KV connector.

Engine-agnostic core (config, policies, manager, transfer, store); only
``kvtool.connector.vllm`` imports vLLM.
"""
