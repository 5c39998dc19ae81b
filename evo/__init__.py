"""evo: evolutionary search for HGEMM CUDA kernels.

Pipeline, one module per stage:
    problem -> proposers -> compile -> check -> timing -> select -> export
"""

__version__ = "0.1.0"
