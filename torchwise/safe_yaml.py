"""Reading YAML without letting it grow: every YAML file torchwise reads (--config files, a run folder's
config.yaml, --space files, the file lr-find --apply edits) goes through `load`.

YAML aliases (`*name`) point at one node that the parser builds once, so a 1 KB file of nested aliases
("billion laughs": nine aliases of nine aliases of ... ) parses in microseconds into a structure that
expands to 9^9 values as soon as anything walks it: a validation message that shows the value, a copy,
a JSON dump. Small, harmless aliases (one section reused under another name) keep working: the size
the document would have with every alias written out is counted on the parsed node graph (each node
once, so counting is linear in the file) and a document over MAX_VALUES is refused before anything is
built from it, as is an alias that contains itself.
"""
from __future__ import annotations

from typing import Any

from torchwise.errors import ConfigError

# A run configuration has about a hundred values and a search space a few dozen: a thousand times that
# still reads in milliseconds, and is far below what expands to gigabytes.
MAX_VALUES = 100_000


def load(text: str, *, source: str) -> Any:
    """The document in `text` as Python values (yaml.safe_load's), or ConfigError naming `source` when
    its aliases expand past MAX_VALUES values or refer to themselves. yaml.YAMLError passes through
    (each caller says what the file is for)."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        size = expanded_size(node, MAX_VALUES)
        if size is None:
            raise ConfigError("This YAML file has an alias that contains itself (a recursive anchor).",
                              values={"file": source},
                              fix="write the values out, or point each alias (*name) at an anchor (&name) that "
                                  "does not contain it")
        if size > MAX_VALUES:
            raise ConfigError(f"This YAML file expands to more than {MAX_VALUES:,} values through its aliases "
                              "(nested *name references): it is refused rather than expanded.",
                              values={"file": source, "size": f"{len(text):,} characters",
                                      "aliases": _count_aliases(text)},
                              fix="write the values out instead of nesting aliases (a configuration needs a few "
                                  "hundred values); a file from someone else may be built to exhaust memory")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def expanded_size(root: Any, limit: int) -> int | None:
    """How many nodes the graph under `root` has with every alias written out, counted once per node
    (a post-order walk with the sizes kept); anything above `limit` is returned as limit + 1, and None
    for a node that contains itself."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node, yaml)
        if children_done:
            open_nodes.discard(key)
            sizes[key] = min(limit + 1, 1 + sum(sizes[id(child)] for child in children))
            continue
        if key in open_nodes:
            return None
        open_nodes.add(key)
        stack.append((node, True))
        for child in children:
            if id(child) in open_nodes:
                return None
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]


def _children(node: Any, yaml: Any) -> list[Any]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _count_aliases(text: str) -> int:
    """Roughly how many alias references the text holds (for the message only)."""
    import re

    return len(re.findall(r"(?<![\w*])\*[\w-]+", text))
