"""Helpers for the guard detector tests."""

import pytest
from llmgw_guard_detectors import (
    InjectionDetector,
    PersonalDataDetector,
    SecretsDetector,
)


def _spans(detector, text):
    return [(f.kind, text[f.start:f.end]) for f in detector.find(text)]


@pytest.fixture(scope="session")
def spans():
    """(kind, matched text) for each finding, read back from the original by position."""
    return _spans


@pytest.fixture(scope="session")
def pii():
    return PersonalDataDetector()


@pytest.fixture(scope="session")
def secrets():
    return SecretsDetector()


@pytest.fixture(scope="session")
def injection():
    return InjectionDetector()
