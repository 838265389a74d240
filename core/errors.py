"""User-facing errors. Anything derived from `UserError` is reported by the CLI as one line naming
the culprit (file, key, parameter, rank) and exits with code 2, never as a traceback."""

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input from the user: a config, a file, a shape, a launch. Its message names the culprit."""


class ConfigError(UserError, ValueError):
    """A config file or override is wrong: unknown key, wrong type, bad value."""

    def __init__(self, message, source=None, key=None):
        where = ":".join(str(p) for p in (source, key) if p)
        super().__init__(f"{where}: {message}" if where else message)
        self.source = source
        self.key = key


class DatasetNotFoundError(UserError, FileNotFoundError):
    """A dataset file or directory named by the user does not exist or is incomplete."""


class DatasetFormatError(UserError, ValueError):
    """A dataset file exists but its contents are not in the expected format."""


class RecordFileError(UserError, IOError):
    """A record file is truncated, corrupt or does not match its schema."""


class CheckpointError(UserError, IOError):
    """A checkpoint is missing, corrupt, or does not fit the network it is loaded into."""


class ShapeError(UserError, ValueError):
    """Tensors whose shapes do not fit an op or a layer; the message gives both shapes."""


class ParallelConfigError(ConfigError):
    """A parallel layout that cannot run on the given ranks (degrees, divisibility, stages)."""
