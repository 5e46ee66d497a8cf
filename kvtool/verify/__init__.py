"""kvtool verify: prove from metrics and logs that the offload tier serves hits."""
