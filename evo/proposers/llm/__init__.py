"""The ``llm`` proposer: language models behind OpenAI-compatible endpoints write child kernels.

Modules: client (endpoints, retries), prompt (templates in evo/prompts), parse (replies ->
candidates), accounting (tokens, dollars, per-model outcomes), proposer (LlmProposer).
"""
from .proposer import LlmProposer

__all__ = ["LlmProposer"]
