"""The one reader of the YAML files people write: machine and cluster descriptions, calibration
bundles' kernels.yaml, config/config.yaml and its schema, config/factors.yaml.

PyYAML's safe loader alone lets through what then breaks far from the file: `.nan`
and `.inf` taken as numbers, 20-digit integers that overflow later, a second `key:` silently
replacing the first, a few KB of aliases expanding to billions of values (the "billion laughs";
MemoryError after a minute), and nesting deep enough to overflow libyaml's recursive composer
(a segmentation fault). A first pass over the parser's events, whose cost does not grow with
alias expansion, refuses all of these with the key where they occur; only then is the document
built.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import yaml

from testbed.common.errors import InputError

# libyaml's loader when PyYAML was built with it (same documents, ~10x faster: a campaign reads
# machine files for every run).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# The largest file of the repository (a machine description) holds ~2,000 values and nests 6
# deep; these bounds are far above any real description and far below what hurts.
MAX_VALUES = 200_000  # once aliases are expanded
MAX_DEPTH = 64
MAX_BYTES = 16 << 20

_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_INT64 = 2**63


class _Open:
    """A sequence or mapping whose end has not been read yet."""

    __slots__ = ("mapping", "index", "key", "want_key", "keys", "first", "anchor", "is_key")

    def __init__(self, mapping: bool, first: int, anchor: str | None, is_key: bool) -> None:
        self.mapping = mapping
        self.index = 0  # sequences: position of the next item
        self.key: str = ""  # mappings: key of the value being read
        self.want_key = True  # mappings: the next node is a key
        self.keys: set[str] = set()
        self.first = first  # values counted before this node's own
        self.anchor = anchor
        self.is_key = is_key  # a mapping or sequence used as a key (YAML allows it)


def _path(stack: list[_Open]) -> str:
    """Key of the node being read, written as InputError keys are: `gpus[1].numa_node`."""
    out = ""
    for depth, o in enumerate(stack):
        if depth == 12:  # deep nesting: the start locates it, 60 more "[0]" would not help
            return out + f"... ({len(stack)} levels)"
        if o.mapping:
            out += ("." if out else "") + o.key
        else:
            out += f"[{o.index}]"
    return out or "(top level)"


def _check_events(file: Path, text: str) -> None:
    stack: list[_Open] = []
    size_of: dict[str, int] = {}  # anchor -> values in its node, aliases expanded
    total = 0  # values read so far, aliases expanded
    scratch = _LOADER("")  # resolves and constructs single scalars exactly as the real load does

    def count(values: int) -> None:
        nonlocal total
        total += values
        if total > MAX_VALUES:
            raise InputError(file, _path(stack), f"at most {MAX_VALUES} values once aliases (*name) are "
                                                 "expanded (an alias bomb?)")

    def as_key(name: str) -> bool:
        """True when the node just started is a mapping key (recorded; a duplicate is refused)."""
        if not stack or not stack[-1].mapping or not stack[-1].want_key:
            return False
        o = stack[-1]
        o.key, o.want_key = name, False
        if name in o.keys and name != "<<":
            raise InputError(file, _path(stack), "each key once per mapping (a second one would silently "
                                                 "replace the first)")
        o.keys.add(name)
        return True

    def placed() -> None:
        """A value is complete: the parent moves to its next key or item."""
        if stack:
            if stack[-1].mapping:
                stack[-1].want_key = True
            else:
                stack[-1].index += 1

    def check_number(ev: yaml.ScalarEvent) -> None:
        tag = ev.tag if ev.tag not in (None, "!") else scratch.resolve(yaml.ScalarNode, ev.value, ev.implicit)
        if tag == _FLOAT:
            if not math.isfinite(scratch.construct_yaml_float(yaml.ScalarNode(tag, ev.value))):
                raise InputError(file, _path(stack), f"a finite number, got {ev.value!r}")
        elif tag == _INT:
            if not -_INT64 <= scratch.construct_yaml_int(yaml.ScalarNode(tag, ev.value)) < _INT64:
                raise InputError(file, _path(stack), f"an integer within 64 bits, got {ev.value!r}")

    try:
        for ev in yaml.parse(text, Loader=_LOADER):
            if isinstance(ev, yaml.ScalarEvent):
                count(1)
                if ev.anchor:
                    size_of[ev.anchor] = 1
                if not as_key(ev.value):
                    check_number(ev)
                    placed()
            elif isinstance(ev, yaml.AliasEvent):
                if ev.anchor not in size_of and any(o.anchor == ev.anchor for o in stack):
                    # An alias inside the node it names: a cycle no description needs. (An
                    # undefined alias is left to the composer's own message.)
                    raise InputError(file, _path(stack), f"no alias *{ev.anchor} inside the node &{ev.anchor} it names")
                count(size_of.get(ev.anchor, 1))
                if not as_key("*" + ev.anchor):
                    placed()
            elif isinstance(ev, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                is_key = as_key("(complex key)")
                count(1)
                stack.append(_Open(isinstance(ev, yaml.MappingStartEvent), total, ev.anchor, is_key))
                if len(stack) > MAX_DEPTH:
                    raise InputError(file, _path(stack), f"at most {MAX_DEPTH} nested mappings/sequences")
            elif isinstance(ev, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                o = stack.pop()
                if o.anchor:
                    size_of[o.anchor] = total - o.first + 1
                if not o.is_key:
                    placed()
    finally:
        scratch.dispose()


def load_yaml(file: str | Path, text: str | None = None) -> Any:
    """The document of `file` (or of `text`, read from `file`); any problem is an InputError
    naming the file, the key and what was expected."""
    file = Path(file)
    if text is None:
        from testbed.common.inputs import check_input_file

        try:
            check_input_file(file, None, "a YAML file", MAX_BYTES)
            with open(file, "rb") as fh:
                raw = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise InputError(file, None, f"a readable YAML file ({exc.strerror})") from None
        if len(raw) > MAX_BYTES:
            raise InputError(file, None, f"a YAML file of at most {MAX_BYTES >> 20} MiB")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(file, None, f"UTF-8 text (byte {exc.start} is not)") from None
    try:
        _check_events(file, text)
        return yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as exc:
        raise InputError(file, None, f"valid YAML ({' '.join(str(exc).split())})") from None
    except (ValueError, OverflowError) as exc:  # a scalar the constructor cannot build (bad date, ...)
        raise InputError(file, None, f"valid YAML values ({exc})") from None


def check_yaml_file(file: str | Path) -> None:
    """For the Snakefile: `file` read with load_yaml, or its InputError on stderr and exit 2
    (snakemake passes a SystemExit through untouched)."""
    try:
        load_yaml(file)
    except InputError as exc:
        print(f"error: {exc.message()}", file=sys.stderr)
        raise SystemExit(2) from None
