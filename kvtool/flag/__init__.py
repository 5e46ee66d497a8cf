"""``kvtool flag NAME``: a flag's, env var's, connector's or tier's history across releases."""
