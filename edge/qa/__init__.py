"""Tools for testing against a real edge process (our tests and publishers' QA teams).

``EdgeProcess`` starts an edge; ``EdgeEvents`` (over HTTP, any edge) and ``BeaconReader``
(its database file) read what it recorded; ``TagMonitor``
watches the tag in a Playwright page; ``edge.qa.plugin`` packages them as pytest fixtures.
"""

from edge.qa.beacons import BeaconReader, BeaconTimeout
from edge.qa.events import EdgeEvents, EdgeEventsError, ImpressionSource
from edge.qa.monitor import TagMonitor
from edge.qa.server import EdgeProcess, free_port

__all__ = [
    "BeaconReader",
    "BeaconTimeout",
    "EdgeEvents",
    "EdgeEventsError",
    "EdgeProcess",
    "ImpressionSource",
    "TagMonitor",
    "free_port",
]
