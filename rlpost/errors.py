"""The one error type users see for bad input: a clear message and exit code 2."""


class ConfigError(ValueError):
    """Bad user input (unknown option, wrong type, impossible combination).

    Raised before any model loads; the CLI prints the message and exits with code 2.
    """

    exit_code = 2
