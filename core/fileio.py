"""Atomic file writes: every file mstrain produces (checkpoints, strategy files, profiles, plots)
is written to a temporary file in the same directory, flushed and fsync'ed, then renamed over the
target, so a crash leaves either the old file or the complete new one, never a partial file.
(Record files commit several shards at once: mstrain.mindrecord.writer does its own renames.)
"""
import json
import os
import tempfile

__all__ = ["atomic_write", "write_bytes_atomically", "write_json_atomically"]


def atomic_write(path, write):
    """Run `write(handle)` on a binary temp file beside `path`, fsync it, rename it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_directory(directory)


def write_bytes_atomically(path, data):
    atomic_write(path, lambda handle: handle.write(data))


def write_json_atomically(path, doc):
    """`doc` as indented, key-sorted JSON."""
    text = json.dumps(doc, indent=1, sort_keys=True).encode()
    write_bytes_atomically(path, text)


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_directory(directory):
    """Make the rename itself durable; some platforms or file systems cannot, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
