"""The YAML loader of specs: safe, bounded (nesting, aliases), strict about duplicate keys.

libyaml's parser (``CParser``) reads the text where PyYAML has it; the document is composed from
its events in Python, because libyaml's own composer recurses in C without a limit (a 16 MiB run of
``[`` overflows the C stack and kills the process) and cannot count what aliases expand to. Nodes
shared through aliases are constructed once, but a consumer that copies the data (validation,
JSON for the database) expands them: a few hundred bytes of "billion laughs" would become
gigabytes. So the composer refuses:

- nesting deeper than :data:`MAX_DEPTH` collections;
- more than :data:`MAX_ALIASES` aliases, or aliases that expand to more than
  :data:`MAX_ALIAS_NODES` nodes in all;
- an alias inside the node it names (a recursive structure).

Each raises :class:`YAMLLimitError`, with the line and column where the limit was passed.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node
from yaml.resolver import BaseResolver, Resolver

try:
    from yaml._yaml import CParser as _Parser

    C_PARSER = True
    """Whether libyaml's parser is used (PyYAML built with libyaml)."""
except ImportError:  # pragma: no cover - PyYAML without libyaml: the same rules in pure Python
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)

    C_PARSER = False

MAX_DEPTH = 64
"""Deepest nesting of mappings and sequences accepted (a spec needs about 10)."""
MAX_ALIASES = 10_000
"""Most aliases (``*name``, merges included) one document may use."""
MAX_ALIAS_NODES = 100_000
"""Most nodes all of a document's aliases may stand for, counted as if each were written out."""


class YAMLLimitError(yaml.MarkedYAMLError):
    """A document passes one of the loader's limits (nesting, aliases)."""


def _limit(problem: str, event: Event) -> YAMLLimitError:
    mark: Any = event.start_mark  # libyaml's marks have the same line and column
    return YAMLLimitError(None, None, problem, mark)


class SpecLoader(Composer, _Parser, SafeConstructor, Resolver):
    """Safe YAML loader: the limits above, no duplicate keys, ``1e-5`` a float (YAML 1.2).

    PyYAML's composer comes before the parser in the bases, so that it, not libyaml's, composes.
    """

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._depth = 0
        self._aliases = 0
        self._alias_nodes = 0
        self._sizes: list[int] = []
        """Expanded node counts of the collections being composed, innermost last."""
        self._anchored: dict[int, int] = {}
        """Expanded node count of each finished anchored node, by ``id``."""

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        """Compose one node within the limits; keep the expanded size of anchored nodes."""
        event = self.peek_event()
        assert event is not None  # the parser ends a document before its stream
        if isinstance(event, AliasEvent):
            node = Composer.compose_node(self, parent, index)
            size = self._anchored.get(id(node))
            if size is None:
                raise _limit(f"alias *{event.anchor} refers to itself", event)
            self._aliases += 1
            self._alias_nodes += size
            if self._aliases > MAX_ALIASES:
                raise _limit(f"more than {MAX_ALIASES} aliases", event)
            if self._alias_nodes > MAX_ALIAS_NODES:
                raise _limit(f"aliases expand to more than {MAX_ALIAS_NODES} nodes", event)
        else:
            if self._depth >= MAX_DEPTH:
                raise _limit(f"nested deeper than {MAX_DEPTH} levels", event)
            self._depth += 1
            self._sizes.append(1)
            try:
                node = Composer.compose_node(self, parent, index)
            finally:
                self._depth -= 1
                size = self._sizes.pop()
            if getattr(event, "anchor", None) is not None:
                self._anchored[id(node)] = size
        if self._sizes:
            self._sizes[-1] += size
        return node

    def compose_document(self) -> Node | None:
        """Compose one document; anchors and their sizes end with it."""
        node = Composer.compose_document(self)
        self._anchored = {}
        return node

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        """Construct one node; a value Python cannot hold is a YAML error at its place."""
        try:
            return SafeConstructor.construct_object(self, node, deep)
        except (ValueError, OverflowError, TypeError) as exc:  # 5000 digits, a 30th of February
            reason = str(exc).split(";")[0]
            raise ConstructorError(
                None, None, f"cannot read this value: {reason}", node.start_mark
            ) from None


def _construct_mapping(loader: SpecLoader, node: MappingNode) -> dict[Hashable, Any]:
    loader.flatten_mapping(node)
    seen: dict[Hashable, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mark = key_node.start_mark
        if not isinstance(key, Hashable):
            raise ConstructorError(None, None, "a mapping's key must be a scalar", mark)
        if key in seen:
            raise ConstructorError(
                None, None, f"duplicate key {key!r} (line {mark.line + 1})", mark
            )
        seen[key] = loader.construct_object(value_node, deep=True)
    return seen


# The stubs bind add_constructor to PyYAML's own loader classes; SpecLoader is one in all but name.
SpecLoader.add_constructor(BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)  # type: ignore[type-var]
SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`SpecLoader` (None for an empty text).

    Raises:
        YAMLLimitError: the document passes a limit of this module.
        yaml.YAMLError: the text is not YAML, or holds a value Python cannot represent.
    """
    loader = SpecLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
