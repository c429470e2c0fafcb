"""llmgw's own guard detectors: personal data, secrets and prompt injection.

Each detector reports positions in the text it was given, never the matched
text, and finds what it looks for through disguises (look-alike letters,
invisible characters, base64/hex/URL encoding): see docs/guardrails-detectors.md.
"""

from __future__ import annotations

from llmgw.plugins import hookimpl
from llmgw.plugins.types import Detector
from llmgw_guard_detectors.injection import DEFAULT_BLOB_THRESHOLD, InjectionDetector
from llmgw_guard_detectors.pii import PersonalDataDetector
from llmgw_guard_detectors.secrets import LLMGW_KEY_PREFIX, SecretsDetector

__all__ = [
    "DEFAULT_BLOB_THRESHOLD",
    "LLMGW_KEY_PREFIX",
    "InjectionDetector",
    "PersonalDataDetector",
    "SecretsDetector",
    "llmgw_guard_detectors",
]


@hookimpl
def llmgw_guard_detectors() -> list[Detector]:
    """One detector per family: `pii`, `secrets`, `injection`."""
    return [PersonalDataDetector(), SecretsDetector(), InjectionDetector()]
