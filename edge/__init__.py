"""The contextual ad edge: partner API (/v1), delivery edge (/dea), sandbox, command line."""

__version__ = "0.1.0"
