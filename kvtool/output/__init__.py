"""The output contract every command follows (one place, so the commands cannot drift).

- The requested report goes to stdout, or to ``-o/--output-file``; progress and chatter
  go to stderr, and ``-q/--quiet`` silences the chatter (warnings and errors stay).
- ``--output-format`` picks a renderer from the command's :class:`~kvtool.output.kinds.ReportKind`:
  ``text`` and ``json`` everywhere, extra machine formats where a command has them
  (audit's ``sarif`` and ``github``). Every JSON document starts with ``schema_version``
  and has a JSON Schema under ``docs/schemas/`` generated from the same code.
- ``--color auto|always|never``; in ``auto``, ``NO_COLOR`` turns every escape code off and
  ``FORCE_COLOR`` turns them on where the stream is not a terminal.
- Where a stream is not a terminal nothing is wrapped or cut, so paths, digests and
  URLs survive a pipe whole.
"""
