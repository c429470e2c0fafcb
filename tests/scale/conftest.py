"""The scale tests' Redis: the limits tests' redis-server fixture (Debian's, on a free loopback port)."""

from limits.conftest import redis_server  # noqa: F401 - a fixture, used by name
