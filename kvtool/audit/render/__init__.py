"""Renderers of an :class:`~kvtool.audit.engine.AuditReport`, one module per output format.

``json``, ``sarif`` and ``github`` return the whole document as a string (machine
formats go to stdout or ``-o``); ``text`` prints a rich report to the console it is given.
"""

OUTPUT_FORMATS = ("text", "json", "sarif", "github")
