"""Documents from outside the broker (JobSet bodies, kubeconfigs) decoded at a bounded cost, into JSON's data
model only, as the Kubernetes API server decodes them.

YAML aliases are refused (a few hundred bytes of them expand to gigabytes), so is nesting deeper than
`MAX_DEPTH`; a value must be one JSON can hold: strings as mapping keys, finite numbers, no binary or set
tags. A YAML date stays the string it was written as. Every refusal is a `DocumentError` saying where.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

# Deeper than any manifest needs (a JobSet's deepest field is about 20 levels down).
MAX_DEPTH = 100


class DocumentError(ValueError):
    """A body that cannot be decoded; the message says where and what to change."""


def _too_deep(where: str = "") -> DocumentError:
    return DocumentError(f"it is nested more than {MAX_DEPTH} levels deep{where}")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise DocumentError(f"the number {text[:40]!r} is out of range; write it as a string or a smaller number")
    return value


def _no_constant(name: str) -> float:
    raise DocumentError(f"{name} is not a JSON number; write a finite number")


def _check_depth(document: Any) -> None:
    """Walk without recursion: the decoders already bound their own recursion; this bounds the result."""
    stack = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise _too_deep()
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


def load_json(data: bytes | str) -> Any:
    """One JSON document; DocumentError if it is not valid JSON, too deep, or holds a non-finite number."""
    try:
        document = json.loads(data, parse_float=_finite, parse_constant=_no_constant)
    except RecursionError:
        raise _too_deep() from None
    except DocumentError:
        raise
    except ValueError as exc:  # also UnicodeDecodeError and integers of more than 4,300 digits
        raise DocumentError(f"it is not valid JSON: {exc}") from None
    _check_depth(document)
    return document


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, narrowed to JSON's data model, refusing aliases and deep nesting."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted; write the value out",
                                              self.peek_event().start_mark)
        if self._depth >= MAX_DEPTH:
            raise yaml.composer.ComposerError(None, None, f"it is nested more than {MAX_DEPTH} levels deep",
                                              self.peek_event().start_mark)
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        mapping = super().construct_mapping(node, deep)
        for key in mapping:
            if not isinstance(key, str):
                raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} must be a string; quote it",
                                                        node.start_mark)
        return mapping

    def _refused(self, node: Any) -> Any:
        raise yaml.constructor.ConstructorError(None, None, f"the tag {node.tag} is not accepted (JSON has no such "
                                                            "value)", node.start_mark)

    def _float(self, node: Any) -> float:
        value = self.construct_yaml_float(node)
        if not math.isfinite(value):
            raise yaml.constructor.ConstructorError(None, None, f"{node.value[:40]!r} is not a finite number; "
                                                                "quote it or write a finite one", node.start_mark)
        return value

    def _int(self, node: Any) -> int:
        try:
            return self.construct_yaml_int(node)
        except ValueError:  # more digits than Python converts
            raise yaml.constructor.ConstructorError(None, None, "the integer has too many digits",
                                                    node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_scalar)
_Loader.add_constructor("tag:yaml.org,2002:float", _Loader._float)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader._int)
for _tag in ("binary", "set", "omap", "pairs"):
    _Loader.add_constructor(f"tag:yaml.org,2002:{_tag}", _Loader._refused)


def load_yaml_all(data: bytes | str) -> list[Any]:
    """Every document of a YAML stream (empty ones dropped); DocumentError says where one goes wrong,
    by line and column only (never quoting the text, which may hold a secret)."""
    try:
        return [d for d in yaml.load_all(data, Loader=_Loader) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise DocumentError(f"it is not valid YAML{where}: {getattr(exc, 'problem', None) or 'it cannot be parsed'}"
                            ) from None
    except RecursionError:
        raise _too_deep() from None
