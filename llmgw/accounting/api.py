"""The contract between the router and accounting: admission by limits and
budgets, settlement, and the usage record. The router imports only this."""

from __future__ import annotations

from typing import Protocol

import attrs

from llmgw.auth.principal import Principal
from llmgw.store.records import UsageRow


class LimitExceeded(Exception):
    """A request refused by a limit: answered 429 with the reason.

    `retry_after` is the seconds until waiting would help (a rate window
    turning over), or None when waiting will not help (a spent monthly budget
    that the client can do nothing about today is still given: the start of
    the next period; None only when no amount of waiting helps).
    """

    def __init__(self, code: str, message: str, *, scope: str, retry_after: float | None):
        super().__init__(message)
        self.status = 429
        self.code = code  #: "rate_limit_exceeded", "tokens_limit_exceeded" or "budget_exceeded"
        self.message = message
        self.scope = scope  #: e.g. "project:4f2a…" — which level refused
        self.retry_after = retry_after


@attrs.define
class Reservation:
    """Budget held for one request between admission and settlement."""

    principal: Principal
    model: str
    reserved_micros: int
    prompt_tokens_estimate: int
    settled: bool = False


class AccountantProtocol(Protocol):
    async def admit(self, principal: Principal, model: str, *, prompt_tokens: int, max_tokens: int) -> Reservation:
        """Check RPM, TPM and budgets on every level of the chain and hold the
        request's worst-case cost (prompt + max_tokens at `model`'s price).
        Raises LimitExceeded. Concurrent admits cannot overshoot a budget."""

    async def settle(self, reservation: Reservation, *, model_served: str, prompt_tokens: int,
                     completion_tokens: int, cached_tokens: int = 0) -> int:
        """Release the hold and charge what was used, at the price of the
        model that answered; returns the cost in micro-dollars."""

    def release(self, reservation: Reservation) -> None:
        """Give the hold back unused (the request failed before any token)."""

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        """Micro-dollars for that many tokens of `model`."""

    def record(self, row: UsageRow) -> None:
        """Queue a usage row for the batched writer; never blocks, never raises."""
