"""kvtool launch: launch configs for each offload setup."""
