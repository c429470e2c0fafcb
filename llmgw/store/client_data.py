"""What clients keep with the gateway, as records: threads, memory notes,
files, batches, and each project's switches for them.

Only for projects that asked (threads, notes and the answer cache are off
until an operator turns them on) or clients that sent something (files and
batches). The shared SQL is in :mod:`llmgw.store.sql_client_data`.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import attrs

#: How long a thread is kept after its last turn when an operator turns threads on without saying.
DEFAULT_THREAD_RETENTION = dt.timedelta(hours=720)
#: How long an answer is reused when an operator turns the cache on without saying.
DEFAULT_CACHE_TTL = dt.timedelta(minutes=10)

#: Thread ids: what a client chooses, so bounded and plain.
MAX_THREAD_ID = 128
#: Turns kept per thread; older ones go (no model's context holds that many anyway).
MAX_THREAD_TURNS = 500

#: Memory notes: a key up to 200 bytes, a note up to 16 KiB, 16 tags, 1000 notes per agent.
MAX_NOTE_KEY_BYTES = 200
MAX_NOTE_TEXT_BYTES = 16 * 1024
MAX_NOTE_TAGS = 16
MAX_TAG_CHARS = 64
MAX_NOTES_PER_AGENT = 1000
MAX_AGENT_CHARS = 128

#: Where a file may come from: uploaded for a batch, or written by one.
FILE_PURPOSES: tuple[str, ...] = ("batch", "batch_output")

#: A batch's states, as OpenAI's Batch API names them.
BATCH_STATUSES: tuple[str, ...] = (
    "validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled",
)
#: States the worker still has something to do in.
BATCH_OPEN: tuple[str, ...] = ("validating", "in_progress", "finalizing", "cancelling")
#: The column each state's time is kept in.
BATCH_STATUS_TIMES: dict[str, str] = {
    "in_progress": "in_progress_at",
    "finalizing": "finalizing_at",
    "completed": "completed_at",
    "failed": "failed_at",
    "expired": "expired_at",
    "cancelling": "cancelling_at",
    "cancelled": "cancelled_at",
}


#: `set_project_features(storage_quota_bytes=SERVER_QUOTA)`: back to the server's quota.
SERVER_QUOTA = -1
#: The owner of files, batches and (for the storage quota) stored responses on a gateway that takes no keys.
ANONYMOUS_OWNER = "anonymous"


@attrs.frozen(kw_only=True)
class ProjectFeatures:
    """A project's switches: stored conversations, memory notes and the answer cache."""

    project_id: str
    threads: bool = False
    thread_retention: dt.timedelta = DEFAULT_THREAD_RETENTION
    memory: bool = False
    cache: bool = False
    cache_ttl: dt.timedelta = DEFAULT_CACHE_TTL
    #: bytes the project may keep (0: no limit); None: the server's router.clients.project_storage_bytes
    storage_quota_bytes: int | None = None
    #: a request asking for more answer tokens than the model's context leaves is refused (400), not fitted
    strict_max_tokens: bool = False
    updated_at: dt.datetime | None = None  # None: never set, the defaults
    actor: str | None = None


@attrs.frozen(kw_only=True)
class ThreadTurn:
    """One turn of a stored conversation: what the client sent and the answer, as chat messages."""

    seq: int  # 1 for the first turn, +1 per turn
    messages: tuple[dict[str, Any], ...] = attrs.field(hash=False)
    tokens: int  # an estimate, for fitting the conversation into a model's context
    created_at: dt.datetime


@attrs.frozen(kw_only=True)
class MemoryNote:
    """A note an agent keeps for itself: private to its project and agent name."""

    project_id: str
    agent: str
    key: str
    text: str
    tags: tuple[str, ...] = ()
    created_at: dt.datetime
    updated_at: dt.datetime


@attrs.frozen(kw_only=True)
class StoredFile:
    """A file of the Files API; its bytes are read apart (``read_file_content``)."""

    id: str  # file-…
    owner: str  # the project's id, else the person's, else "anonymous" (a gateway without keys)
    purpose: str  # one of FILE_PURPOSES
    filename: str
    bytes: int
    created_at: dt.datetime
    expires_at: dt.datetime | None = None


@attrs.frozen(kw_only=True)
class Batch:
    """A batch of the Batch API, with the counts of its lines."""

    id: str  # batch_…
    owner: str
    key_id: str  # the key that submitted it; its lines are charged to it ("" without keys)
    principal: dict[str, Any] = attrs.field(hash=False)  # who submitted it, as the gateway saw them
    endpoint: str
    completion_window: str
    input_file_id: str
    status: str  # one of BATCH_STATUSES
    output_file_id: str | None = None
    error_file_id: str | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0
    errors: list[dict[str, Any]] | None = attrs.field(default=None, hash=False)
    metadata: dict[str, str] | None = attrs.field(default=None, hash=False)
    created_at: dt.datetime
    expires_at: dt.datetime
    in_progress_at: dt.datetime | None = None
    finalizing_at: dt.datetime | None = None
    completed_at: dt.datetime | None = None
    failed_at: dt.datetime | None = None
    expired_at: dt.datetime | None = None
    cancelling_at: dt.datetime | None = None
    cancelled_at: dt.datetime | None = None


@attrs.frozen(kw_only=True)
class BatchResult:
    """What one line of a batch came to: a line of its output file (ok) or of its error file."""

    line: int  # 1 for the input file's first line
    custom_id: str
    ok: bool
    text: str  # the JSON line, without its newline
