"""Tools for testing against a real edge process (our tests and publishers' QA teams).

``EdgeProcess`` starts an edge; ``BeaconReader`` reads what it recorded; ``TagMonitor``
watches the tag in a Playwright page; ``edge.qa.plugin`` packages them as pytest fixtures.
"""

from edge.qa.beacons import BeaconReader, BeaconTimeout
from edge.qa.monitor import TagMonitor
from edge.qa.server import EdgeProcess, free_port

__all__ = ["BeaconReader", "BeaconTimeout", "EdgeProcess", "TagMonitor", "free_port"]
