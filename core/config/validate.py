"""Turn a composed config mapping into a typed schema instance, or raise one clear ConfigError.

The schema is a dataclass whose fields are declared with `mstrain.config.option(...)`: a type
annotation (int, float, bool, str, Optional[X], Literal[...], Enum, list/tuple/dict of X, nested
dataclass), a default and a help text. Every error names the config file and the dotted key:

    configs/mlp_mnist.yaml:train.epochs: expected int, got 'ten' (set by override train.epochs=ten)
"""
import dataclasses
import difflib
import enum
import typing

from ..errors import ConfigError

__all__ = ["validate", "type_name"]

_MISSING = dataclasses.MISSING


class _Mismatch(Exception):
    """The value does not fit the annotation; args[0] says what was expected."""


def validate(data, schema, source, overrides=None):
    """Build `schema` (a dataclass type) from the mapping `data`, checking every key and value.

    source: the config file named in errors; overrides: {dotted key: override text} to mention
    when a bad value came from the command line. Raises ConfigError.
    """
    return _Validator(source, overrides or {}).build(data, schema, "")


class _Validator:
    def __init__(self, source, overrides):
        self.source = source
        self.overrides = overrides

    def fail(self, key, message):
        origin = self.overrides.get(key)
        suffix = f" (set by override {origin})" if origin else ""
        raise ConfigError(message + suffix, source=self.source, key=key or None)

    def build(self, data, schema, prefix):
        if not isinstance(data, dict):
            self.fail(prefix, f"expected a mapping of {schema.__name__} keys, got {_show(data)}")
        fields = {f.name: f for f in dataclasses.fields(schema) if f.init}
        hints = typing.get_type_hints(schema)
        for key in data:
            if key not in fields:
                self.fail(_join(prefix, key), _unknown_key_message(key, fields, prefix))
        values = {}
        for name, field in fields.items():
            key = _join(prefix, name)
            if name in data:
                values[name] = self.convert(data[name], hints[name], key)
                self.check_metadata(values[name], field, key)
            elif field.default is _MISSING and field.default_factory is _MISSING:
                self.fail(key, f"missing required key ({_help(field)})")
        try:
            return schema(**values)
        except (ValueError, TypeError) as exc:  # a schema's __post_init__ rejected a combination
            self.fail(prefix, str(exc))

    def convert(self, value, annotation, key):
        if dataclasses.is_dataclass(annotation):
            return self.build(value, annotation, key)
        try:
            return self.convert_plain(value, annotation, key)
        except _Mismatch as exc:
            self.fail(key, f"expected {exc.args[0]}, got {_show(value)}")

    def convert_plain(self, value, annotation, key):
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if annotation is typing.Any:
            return value
        if origin is typing.Union:
            return self.convert_union(value, args, key)
        if origin is typing.Literal:
            if any(type(a) is type(value) and a == value for a in args):  # True is not 1 here
                return value
            raise _Mismatch("one of " + ", ".join(repr(a) for a in args))
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return _convert_enum(value, annotation)
        if origin in (list, tuple) or annotation in (list, tuple):
            return self.convert_sequence(value, annotation, key)
        if origin is dict or annotation is dict:
            return self.convert_mapping(value, args, key)
        return _convert_scalar(value, annotation)

    def convert_union(self, value, args, key):
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            if dataclasses.is_dataclass(arg):
                return self.build(value, arg, key)
            try:
                return self.convert_plain(value, arg, key)
            except _Mismatch:
                continue
        raise _Mismatch(type_name(typing.Union[args]))

    def convert_sequence(self, value, annotation, key):
        if not isinstance(value, (list, tuple)):
            raise _Mismatch(type_name(annotation))
        origin = typing.get_origin(annotation) or annotation
        args = typing.get_args(annotation)
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise _Mismatch(type_name(annotation))
            item_types = args
        else:
            item_types = [args[0] if args else typing.Any] * len(value)
        items = [self.convert(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, item_types))]
        return tuple(items) if origin is tuple else items

    def convert_mapping(self, value, args, key):
        if not isinstance(value, dict):
            raise _Mismatch(type_name(typing.Dict[args] if args else dict))
        value_type = args[1] if args else typing.Any
        return {k: self.convert(v, value_type, _join(key, str(k))) for k, v in value.items()}

    def check_metadata(self, value, field, key):
        choices = field.metadata.get("choices")
        if choices is not None and value not in choices:
            self.fail(key, f"{_show(value)} is not one of " + ", ".join(repr(c) for c in choices))
        low, high = field.metadata.get("low"), field.metadata.get("high")
        for item in (value if isinstance(value, (list, tuple)) else [value]):
            if isinstance(item, (int, float)) and not isinstance(item, bool):
                if (low is not None and item < low) or (high is not None and item > high):
                    self.fail(key, f"{_show(item)} is outside [{_bound(low, '-inf')}, {_bound(high, 'inf')}]")
        check = field.metadata.get("check")
        problem = None if check is None else check(value)
        if problem is not None:
            self.fail(key, problem)


# -- scalar conversion -------------------------------------------------------------------------------
def _convert_scalar(value, annotation):
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads '1e-3' as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif annotation is str:
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # `name=2024` parses as a number
    elif isinstance(annotation, type) and isinstance(value, annotation):
        return value
    raise _Mismatch(type_name(annotation))


def _convert_enum(value, enum_type):
    for member in enum_type:
        if value == member.value or value == member.name:
            return member
    raise _Mismatch("one of " + ", ".join(repr(m.value) for m in enum_type))


# -- messages ----------------------------------------------------------------------------------------
def type_name(annotation):
    """Readable name of an annotation: 'int', 'list of float', 'one of 'a', 'b'', 'int or None'."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union:
        names = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(names) + (" or None" if type(None) in args else "")
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin in (list, tuple):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} items (" + ", ".join(type_name(a) for a in args) + ")"
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {type_name(args[1])}" if args else "mapping"
    return getattr(annotation, "__name__", str(annotation))


def _unknown_key_message(key, fields, prefix):
    close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean '{_join(prefix, close[0])}'?)"
    return "unknown key; valid keys here: " + ", ".join(sorted(fields))


def _help(field):
    return field.metadata.get("help", field.name)


def _show(value):
    return repr(value) if isinstance(value, str) else str(value)


def _bound(bound, unbounded):
    return unbounded if bound is None else bound


def _join(prefix, key):
    return f"{prefix}.{key}" if prefix else str(key)
