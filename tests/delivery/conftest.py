"""The /dea handler tests use the partner route tests' ``make_client``, which checks every
response they provoke against /openapi.json."""

from tests.routes.conftest import make_client

__all__ = ["make_client"]
