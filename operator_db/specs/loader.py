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

Each raises :class:`YAMLLimitError`, with the line and column where the limit was passed. These
limits come first, whatever PyYAML's release: where libyaml refuses a document by a limit of its
own (libyaml 0.2.6 stops at 1,000 levels, scanning a kilobyte ahead of the events composed here),
:func:`load_yaml` reads it again with PyYAML's pure-Python parser, which has no such limit.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.events import AliasEvent, Event
from yaml.nodes import MappingNode, Node
from yaml.parser import Parser as _PyParser
from yaml.reader import Reader
from yaml.resolver import BaseResolver, Resolver
from yaml.scanner import Scanner


class _PythonParser(Reader, Scanner, _PyParser):
    """PyYAML's pure-Python reader, scanner and parser: slower, but with no limits of its own."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        _PyParser.__init__(self)


try:
    from yaml._yaml import CParser as _Parser

    C_PARSER = True
    """Whether libyaml's parser is used (PyYAML built with libyaml)."""
except ImportError:  # pragma: no cover - PyYAML without libyaml: the same rules in pure Python
    _Parser = _PythonParser  # type: ignore[assignment,misc]
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


class _LimitedComposer(Composer, SafeConstructor, Resolver):
    """Safe YAML composing and construction: the limits above, no duplicate keys, ``1e-5`` a float.

    A loader is this with a parser after it in the bases (:class:`SpecLoader`, libyaml's where
    PyYAML has it; :class:`PythonSpecLoader`), so that PyYAML's composer, not libyaml's, composes.
    """

    if TYPE_CHECKING:  # from the parser the loader puts after this class

        def peek_event(self) -> Event | None: ...

    def __init__(self) -> None:
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


class SpecLoader(_LimitedComposer, _Parser):
    """The spec loader: :class:`_LimitedComposer` over libyaml's parser (fast)."""

    def __init__(self, stream: str) -> None:
        _Parser.__init__(self, stream)
        _LimitedComposer.__init__(self)


class PythonSpecLoader(_LimitedComposer, _PythonParser):
    """The spec loader over PyYAML's pure-Python parser, which has no limits of its own."""

    def __init__(self, stream: str) -> None:
        _PythonParser.__init__(self, stream)
        _LimitedComposer.__init__(self)


def _construct_mapping(loader: _LimitedComposer, node: MappingNode) -> dict[Hashable, Any]:
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
_LimitedComposer.add_constructor(BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)  # type: ignore[type-var]
_LimitedComposer.add_implicit_resolver(
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


def _refused_by_libyaml(exc: yaml.YAMLError) -> bool:
    """Whether libyaml refused a document by a limit of its own (libyaml 0.2.6: nesting).

    libyaml's scanner reads up to a kilobyte ahead of the events this module composes, so its
    limit can fire before this module's at a place of its own choosing.
    """
    problem = getattr(exc, "problem", None) or ""
    return "maximum nesting depth" in problem


def load_yaml(text: str) -> Any:
    """Parse one YAML document with :class:`SpecLoader` (None for an empty text).

    The limits of this module are checked before any of the library's: where libyaml refuses a
    document by a limit of its own, it is read again with PyYAML's Python parser, which has none,
    so that the error (or the document) is the same whatever PyYAML or libyaml release is here.

    Raises:
        YAMLLimitError: the document passes a limit of this module.
        yaml.YAMLError: the text is not YAML, or holds a value Python cannot represent.
    """
    try:
        return _load_with(SpecLoader, text)
    except yaml.YAMLError as exc:
        if isinstance(exc, YAMLLimitError) or not _refused_by_libyaml(exc):
            raise
    return _load_with(PythonSpecLoader, text)


def _load_with(loader_class: type[SpecLoader] | type[PythonSpecLoader], text: str) -> Any:
    loader = loader_class(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
