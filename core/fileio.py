"""Atomic file writes: every file mstrain produces (checkpoints, strategy files, profiles, plots)
is written to a temporary file in the same directory, flushed and fsync'ed, then renamed over the
target, so a crash leaves either the old file or the complete new one, never a partial file.
(Record files commit several shards at once: mstrain.mindrecord.writer does its own renames.)

A process killed mid-write (SIGKILL, power loss) cannot delete its temp file. Temp names carry
the writer's host and process id (`.<name>.<host>-<pid>.<random>.tmp`), so
`remove_stale_temp_files` can delete those whose writer is gone without touching a live write.
"""
import json
import os
import re
import socket
import tempfile

__all__ = ["atomic_write", "write_bytes_atomically", "write_json_atomically", "remove_stale_temp_files"]


def _writer_tag():
    host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def atomic_write(path, write):
    """Run `write(handle)` on a binary temp file beside `path`, fsync it, rename it over `path`."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.{_writer_tag()}.", suffix=".tmp")
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


def _process_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user
        return True
    return True


def remove_stale_temp_files(directory, name_prefix=""):
    """Delete the temp files `atomic_write` left in `directory` for targets whose name starts with
    `name_prefix`, when their writer (a process of this host) no longer runs; returns their paths.
    Writes of live processes, and temp files of other hosts, are left alone."""
    pattern = re.compile(r"\." + re.escape(name_prefix) + r".*\.(?P<host>[A-Za-z0-9_-]+)-(?P<pid>\d+)\.[^.]+\.tmp")
    host = _writer_tag().rsplit("-", 1)[0]
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    removed = []
    for name in names:
        match = pattern.fullmatch(name)
        if match is None or match["host"] != host or _process_alive(int(match["pid"])):
            continue
        try:
            os.unlink(os.path.join(directory, name))
            removed.append(os.path.join(directory, name))
        except FileNotFoundError:
            pass
    return removed


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
