"""Command-line pieces shared by evo.search, evo.evaluate and evo.sweep."""
from __future__ import annotations

import argparse
import sys

from .config import Config, load_config
from .errors import EvoError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit code 2 (argparse's own convention)
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def parser(prog: str, description: str) -> argparse.ArgumentParser:
    p = _Parser(prog=prog, description=description)
    p.add_argument("--config", help="YAML file overriding evo/defaults.yaml")
    p.add_argument("--db", help="SQLite archive (default .evo/evo.db)")
    p.add_argument("--out", help="kernel table folder (default kernels_out)")
    p.add_argument("--seed", type=int, help="random seed of the search")
    p.add_argument("--families", help="comma list of kernel families (default: all for the GPU's arch)")
    p.add_argument("--jobs", type=int, help="parallel nvcc processes")
    return p


def config_from_args(args: argparse.Namespace, search: dict | None = None) -> Config:
    overrides: dict[str, dict] = {
        "search": {"seed": args.seed, "families": args.families.split(",") if args.families else None, **(search or {})},
        "paths": {"db": args.db, "out": args.out},
        "compile": {"jobs": args.jobs},
    }
    return load_config(args.config, overrides)


def require_positive(value: float | None, flag: str) -> None:
    if value is not None and value < 0:
        raise EvoError(f"{flag} must not be negative")
