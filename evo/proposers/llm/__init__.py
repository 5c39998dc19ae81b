"""The ``llm`` proposer: language models behind OpenAI-compatible endpoints write child kernels.

Modules: client (endpoints from config, flags and environment; retries), preflight (the start-up chat
request), prompt (templates in evo/prompts), evidence (ptxas, Nsight Compute, library kernel, lineage, family
best of a parent, from the archive), sections (optional prompt sections and the per-prompt token budget),
parse (replies -> candidates), accounting (tokens, dollars, caps checked before each request, per-model
outcomes), proposer (LlmProposer).
"""
from .proposer import LlmProposer

__all__ = ["LlmProposer"]
