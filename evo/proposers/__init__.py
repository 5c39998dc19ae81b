"""Proposers write new candidate kernels from the population."""
