"""kvtool: the operator's toolkit for vLLM with KV-cache offload."""

import os

__version__ = "0.2.0"

# kvtool uses no pydantic plugins; without this, the first model class built scans the
# entry points of every installed distribution (about 30 ms of every command's start).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
