"""Shared parts of the partner routes (/v1 UGC and AI, Ad Manager, sandbox, legacy):
body validation, geo signals, the key-and-rate door, rendering, OpenAPI schemas."""
