"""No knob that nothing reads: every key of every registered job's config schema, and every key
of set_context / set_auto_parallel_context, is read by code outside the module declaring it.

A static complement to the behavioural tests of each key (a key named nowhere else cannot act).
Keys that can only hold their one meaningful value (device_target 'CPU', device_id 0) are
checked by validation instead."""
import dataclasses
import re
import sys
import typing
from pathlib import Path

import pytest

from mstrain import context as core_context
from mstrain.config import schema as core_schema
from mstrain.parallel import context as parallel_context
from mstrain.registry import get_job, known_jobs

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = ("core", "gnn", "transformer", "recommender", "reinforcement")


def _sources():
    files = {}
    for folder in PACKAGE_DIRS:
        for path in (ROOT / folder).rglob("*.py"):
            files[path.resolve()] = path.read_text()
    return files


SOURCES = _sources()


def _leaf_fields(schema, prefix=""):
    hints = typing.get_type_hints(schema)
    for field in dataclasses.fields(schema):
        kind = hints[field.name]
        if dataclasses.is_dataclass(kind):
            yield from _leaf_fields(kind, f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}", field.name, schema


def _schema_keys():
    keys = {}
    for name in sorted(known_jobs()):
        for dotted, leaf, owner in _leaf_fields(get_job(name).schema):
            keys.setdefault((leaf, owner), (name, dotted))
    return keys


def _read_outside_definition(name, defining_file=None, definition=None):
    """Where `name` is read as an attribute or a string key, not counting the lines that declare it."""
    pattern = re.compile(r"\." + re.escape(name) + r"\b|[\"']" + re.escape(name) + r"[\"']")
    declaration = definition or re.compile(r"^\s*" + re.escape(name) + r"\s*:")
    hits = []
    for path, text in SOURCES.items():
        if path == defining_file or not pattern.search(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if pattern.search(line) and not declaration.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}")
    return hits


SCHEMA_KEYS = _schema_keys()
_SIGNATURE = re.compile(r"\bdef \w+\((.*?)\)\s*(?:->[^:]*)?:", re.S)


def _parameter_of_a_function_beside(name, owner):
    """True when `name` is a parameter of a function in the package folder declaring `owner`:
    a section handed over as keyword arguments (`Learner(**section)`, the MindSpore Reinforcement
    algorithm_config style) is read through the parameters of the class it builds."""
    folder = Path(sys.modules[owner.__module__].__file__).resolve().parent
    parameter = re.compile(r"(?:^|[(,\s])" + re.escape(name) + r"\s*(?:=|:|,|$)")
    return any(parameter.search(signature)
               for path, text in SOURCES.items() if path.parent == folder
               for signature in _SIGNATURE.findall(text))


@pytest.mark.parametrize("leaf, owner", list(SCHEMA_KEYS), ids=[f"{j}:{k}" for j, k in SCHEMA_KEYS.values()])
def test_every_config_key_is_read(leaf, owner):
    job, dotted = SCHEMA_KEYS[(leaf, owner)]
    assert leaf != "" and (_read_outside_definition(leaf) or _parameter_of_a_function_beside(leaf, owner)), \
        f"config key {dotted} of job {job} ({owner.__name__}) is read nowhere"


def _context_keys():
    keys = []
    for module in (core_context, parallel_context):
        choices = getattr(module, "_CHOICES", {})
        for key in module._DEFAULTS:
            if len(choices.get(key, ())) == 1:
                continue  # validation pins it to its only value
            keys.append((module, key))
    return keys


def _without_declarations(text):
    """A context module's text without its tables of defaults and choices (which name every key)."""
    text = re.sub(r"\n_DEFAULTS = \{.*?\n\}", "\n", text, flags=re.S)
    return "\n".join(line for line in text.splitlines()
                     if not re.match(r"_(CHOICES|PER_RANK_KEYS|POSITIVE_INTS) = ", line))


@pytest.mark.parametrize("module, key", _context_keys(), ids=lambda v: getattr(v, "__name__", v))
def test_every_context_key_is_read(module, key):
    string_key = re.compile(r"[\"']" + re.escape(key) + r"[\"']")
    own = Path(module.__file__).resolve()
    readers = [path for path, text in SOURCES.items()
               if string_key.search(_without_declarations(text) if path == own else text)]
    assert readers, f"context key {key!r} of {module.__name__} is read nowhere"


def test_the_check_finds_an_unread_key(tmp_path):
    assert not _read_outside_definition("a_key_no_code_reads_at_all")
    assert _read_outside_definition("recompute")
    assert len(SCHEMA_KEYS) > 40 and len(_context_keys()) > 15
