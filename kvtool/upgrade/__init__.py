"""``kvtool upgrade``: what changes for serve invocations on the way to a newer vLLM release."""
