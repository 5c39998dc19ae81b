"""Tokens, dollars and outcomes, per model and per run, with the budget cap."""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ...errors import EvoError
from .sections import CHARS_PER_TOKEN


@dataclass
class ModelStats:
    """What one model (endpoint) did in this run."""

    model: str = ""  # the model id sent to the endpoint
    requests: int = 0  # chat requests sent (retries not counted)
    retries: int = 0  # extra attempts after 429 / 5xx / timeouts / connection errors
    failed_requests: int = 0  # gave up after the retries, or a non-retryable HTTP error
    replies: int = 0
    proposals: int = 0  # usable children handed to the search
    unusable: Counter = field(default_factory=Counter)  # reason -> replies
    fix_requests: int = 0
    evaluated: int = 0
    compiled: int = 0
    correct: int = 0
    improved: int = 0  # correct and faster than its (measured) parent
    fixed: int = 0  # a fix prompt's child that came out correct
    best_us: float = 0.0
    best_speedup: float = 0.0  # best parent_us / child_us among improvements
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_estimated: bool = False  # some reply had no usage: counted as chars / 4
    cost_usd: float = 0.0
    seconds: float = 0.0  # waiting for replies

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["unusable"] = dict(self.unusable)
        return d


class Ledger:
    """Token and dollar spend of the run, thread-safe, with the budget cap."""

    def __init__(self, budget_tokens: int = 0, budget_usd: float = 0.0, prices: dict | None = None):
        self.budget_tokens = int(budget_tokens or 0)
        self.budget_usd = float(budget_usd or 0.0)
        self.prices = self._check_prices(prices or {})
        self.tokens_in = 0
        self.tokens_out = 0
        self.cost_usd = 0.0
        self.held_tokens = 0  # estimates of requests in flight (reserve / settle)
        self.held_usd = 0.0
        self.refused = 0  # requests not sent because their estimate would pass a cap
        self._lock = threading.Lock()

    @staticmethod
    def _check_prices(prices: dict) -> dict[str, tuple[float, float]]:
        out = {}
        for model, p in prices.items():
            if not isinstance(p, dict) or not {"input_per_mtok", "output_per_mtok"} <= set(p):
                raise EvoError(f"config llm.prices.{model} must be {{input_per_mtok: USD, output_per_mtok: USD}}")
            try:
                out[str(model)] = (float(p["input_per_mtok"]), float(p["output_per_mtok"]))
            except (TypeError, ValueError):
                raise EvoError(f"config llm.prices.{model}: prices must be numbers") from None
        return out

    def price(self, *names: str) -> tuple[float, float] | None:
        for n in names:
            if n in self.prices:
                return self.prices[n]
        return None

    def require_prices(self, endpoints: list[tuple[str, str]]) -> None:
        if self.budget_usd <= 0:
            return
        missing = [model for name, model in endpoints if self.price(name, model) is None]
        if missing:
            raise EvoError(f"config llm.budget_usd needs a price in llm.prices for model {', '.join(missing)}")

    def estimate(self, prompt_chars: int, max_tokens: int, *names: str) -> tuple[int, float]:
        """(tokens, dollars) a request may cost at most: its prompt at 4 characters a token plus max_tokens."""
        tin, tout = prompt_chars // CHARS_PER_TOKEN + 1, max(0, int(max_tokens))
        p = self.price(*names)
        return tin + tout, (tin * p[0] + tout * p[1]) / 1e6 if p else 0.0

    def reserve(self, prompt_chars: int, max_tokens: int, *names: str) -> tuple[int, float] | None:
        """Checked before a request goes out: hold its estimate and return it, or None (send nothing) when
        what is spent, what requests in flight may spend and this estimate together would pass a cap."""
        tokens, usd = self.estimate(prompt_chars, max_tokens, *names)
        with self._lock:
            if self.budget_tokens and self.tokens_in + self.tokens_out + self.held_tokens + tokens > self.budget_tokens:
                self.refused += 1
                return None
            if self.budget_usd and self.cost_usd + self.held_usd + usd > self.budget_usd:
                self.refused += 1
                return None
            self.held_tokens += tokens
            self.held_usd += usd
        return tokens, usd

    def release(self, held: tuple[int, float] | None) -> None:
        if held:
            with self._lock:
                self.held_tokens -= held[0]
                self.held_usd -= held[1]

    def charge(self, tokens_in: int, tokens_out: int, *names: str) -> float:
        p = self.price(*names)
        cost = (tokens_in * p[0] + tokens_out * p[1]) / 1e6 if p else 0.0
        with self._lock:
            self.tokens_in += tokens_in
            self.tokens_out += tokens_out
            self.cost_usd += cost
        return cost

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

    @property
    def exhausted(self) -> bool:
        with self._lock:
            if self.refused:
                return True
            if self.budget_tokens and self.tokens_in + self.tokens_out >= self.budget_tokens:
                return True
            return bool(self.budget_usd and self.cost_usd >= self.budget_usd)

    def to_dict(self) -> dict[str, Any]:
        return {"tokens_in": self.tokens_in, "tokens_out": self.tokens_out, "cost_usd": round(self.cost_usd, 6),
                "budget_tokens": self.budget_tokens, "budget_usd": self.budget_usd, "refused_by_budget": self.refused,
                "exhausted": self.exhausted}


def fmt_tokens(n: int) -> str:
    if n >= 1_000_000:
        return f"{n / 1e6:.2f}M"
    if n >= 10_000:
        return f"{n / 1e3:.0f}k"
    return str(n)
