"""What tokens cost: a price per model, per million tokens, as micro-dollars.

Prices come from server.yaml: a model's own ``price``, else
``prices.default``. They are in the currency of ``prices.currency`` per
million tokens, so a token costs exactly "price" micro-units: 1.50 per
million prompt tokens is 1.5 micro-dollars a token. Costs are rounded up to
a whole micro-unit, so no request that used tokens of a priced model is free.

Cached prompt tokens are priced as prompt tokens: engines count them in
``prompt_tokens`` already, and the configuration has no separate price.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal

import attrs

from llmgw.adapters.names import base_aliases

MICROS = 1_000_000


@attrs.frozen
class ModelPrice:
    """Micro-units per token (which is the same number as units per million tokens)."""

    input: Decimal = Decimal(0)
    output: Decimal = Decimal(0)

    @classmethod
    def per_million(cls, input: float | str | Decimal, output: float | str | Decimal) -> ModelPrice:
        return cls(_decimal(input, "input"), _decimal(output, "output"))

    @property
    def free(self) -> bool:
        return self.input == 0 and self.output == 0

    def cost(self, prompt_tokens: int, completion_tokens: int) -> int:
        """Micro-units for that many tokens, rounded up."""
        total = self.input * max(0, int(prompt_tokens)) + self.output * max(0, int(completion_tokens))
        return math.ceil(total)


def _decimal(value: float | str | Decimal, what: str) -> Decimal:
    # str() first: Decimal(0.1) would carry the float's binary error into every sum.
    d = Decimal(str(value))
    if not d.is_finite() or d < 0:
        raise ValueError(f"price {what}: expected a number of zero or more, got {value!r}")
    return d


class PriceBook:
    """Prices by model name (or alias), with a default for the rest."""

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None, default: ModelPrice | None = None,
                 currency: str = "USD") -> None:
        self._prices = dict(prices or {})
        self.default = default or ModelPrice()
        self.currency = currency

    @classmethod
    def from_config(cls, config) -> PriceBook:
        """From a ServerConfig: ``models[].price`` (for the name and every alias), else ``prices.default``."""
        d = config.prices.default
        default = ModelPrice.per_million(d.input, d.output)
        prices: dict[str, ModelPrice] = {}
        for model in config.models:
            if model.price is None:
                continue
            price = ModelPrice.per_million(model.price.input, model.price.output)
            for name in (model.name, *model.aliases):
                prices.setdefault(name, price)
        for name, base in base_aliases(config.models).items():  # adapters: priced as their base
            if base in prices:
                prices.setdefault(name, prices[base])
        return cls(prices, default, config.prices.currency)

    def price(self, model: str) -> ModelPrice:
        return self._prices.get(model, self.default)

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> int:
        """Micro-units for that many tokens of ``model`` (cached tokens are in prompt_tokens)."""
        return self.price(model).cost(prompt_tokens, completion_tokens)


def format_money(micros: int, currency: str = "") -> str:
    """Micro-units as an amount: two decimals at least, more only when they are not zero (``12.50``, ``0.000125``)."""
    sign = "-" if micros < 0 else ""
    units, rest = divmod(abs(int(micros)), MICROS)
    text = f"{units}.{rest:06d}".rstrip("0")
    if len(text.split(".")[1]) < 2:
        text = f"{units}.{rest // 10_000:02d}"
    return f"{sign}{text}{' ' + currency if currency else ''}"


def parse_money(text: str, what: str = "budget") -> int:
    """``12.5`` (units) → micro-units; ValueError naming ``what`` otherwise."""
    try:
        d = Decimal(str(text).strip().lstrip("$"))
    except (ArithmeticError, ValueError):
        raise ValueError(f"{what}: expected an amount like 25 or 12.50, got {text!r}") from None
    if not d.is_finite() or d < 0:
        raise ValueError(f"{what}: expected an amount of zero or more, got {text!r}")
    micros = d * MICROS
    if micros != micros.to_integral_value():
        raise ValueError(f"{what}: {text!r} is finer than a millionth")
    return int(micros)
