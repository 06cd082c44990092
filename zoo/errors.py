"""The one exception type users see as a one-line message from the `zoo` command."""


class ZooError(ValueError):
    """Bad input (config, data, checkpoint, arguments): the message names the problem.

    The CLI prints ``zoo: error: <message>`` and exits with status 2 instead of a traceback
    (set ``ZOO_DEBUG=1`` to get the traceback).
    """


def flat(e: BaseException) -> str:
    """A library exception's text on one line, for a ZooError that quotes it (pandas' parser messages end in a
    newline, huggingface_hub appends the request id on another line)."""
    return " ".join(str(e).split()) or type(e).__name__
