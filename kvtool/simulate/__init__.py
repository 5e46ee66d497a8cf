"""kvtool simulate: replay a workload through the drain policies."""
