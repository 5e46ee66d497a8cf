"""Errors that end a command with a one-line message and exit code 2."""


class KvtoolError(Exception):
    """Bad input or usage: the CLI prints ``kvtool: error: <message>`` and exits 2.

    The message must name what was wrong and where (file, line, field), because
    it is all the user sees: no traceback is ever shown for this class.
    """
