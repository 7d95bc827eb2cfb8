"""Node shapes: what kinds of node a cluster has or can launch, and how many."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NodeShape:
    """Resources of one kind of node and how many of them there can be.

    Attributes:
        name: Node type name (or ``node <id>`` for a live node).
        resources: Resource name → amount on one node.
        count: How many such nodes can exist at once.
    """

    name: str
    resources: dict[str, float]
    count: int
