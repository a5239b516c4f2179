"""Tools for testing against a real edge process (our tests and publishers' QA teams)."""

from edge.qa.server import EdgeProcess, free_port

__all__ = ["EdgeProcess", "free_port"]
