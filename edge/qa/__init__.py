"""Tools for testing against a real edge process (our tests and publishers' QA teams).

``EdgeProcess`` starts an edge; ``EdgeEvents`` (over HTTP, any edge) and ``BeaconReader``
(its database file) read what it recorded; ``TagMonitor``
watches the tag in a Playwright page; ``edge.qa.plugin`` packages them as pytest fixtures.
"""

from edge.qa.beacons import BeaconReader, BeaconTimeout
from edge.qa.events import EdgeEvents, EdgeEventsError, ImpressionSource
from edge.qa.monitor import TagMonitor
from edge.qa.server import EdgeProcess, free_port

# A desktop Chrome's user agent for test browsers: headless Chromium calls itself
# "HeadlessChrome", which the edge counts as a bot (invalid traffic, never counted).
READER_USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/156.0.0.0 Safari/537.36"
)

__all__ = [
    "READER_USER_AGENT",
    "BeaconReader",
    "BeaconTimeout",
    "EdgeEvents",
    "EdgeEventsError",
    "EdgeProcess",
    "ImpressionSource",
    "TagMonitor",
    "free_port",
]
