"""Every LLM conversation kept in the archive: the prompt, the reply, the model, tokens, latency and the
candidate it became.

    python -m evo.conversations list [--shape 4096x4096x1024] [--last 20]
    python -m evo.conversations show ID [--sections]       # the whole prompt and reply
    python -m evo.conversations --candidate HASH           # the conversation(s) that made a candidate
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO

from .errors import EvoError, cli_entry
from .store import Store


def _row_line(r: Any) -> str:
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created"] or 0))
    cand = (r["candidate"] or "")[:10] or "-"
    size = f"{r['prompt_chars'] or 0} chars (~{(r['prompt_chars'] or 0) // 4} tok)"
    return (f"{r['id']:>5}  {when}  {r['shape'] or '-':<16} {r['kind'] or '-':<8} {r['model'] or '-':<20} "
            f"{r['tokens_in'] or 0:>6}/{r['tokens_out'] or 0:<6} {float(r['latency_s'] or 0):6.1f}s  "
            f"{r['outcome'] or '-':<16} {cand:<10}  prompt {size}")


def list_rows(rows: list[Any], out: TextIO) -> None:
    if not rows:
        print("no conversations in this archive", file=out)
        return
    print(f"{'id':>5}  {'when':<16}  {'shape':<16} {'kind':<8} {'model':<20} {'tok in/out':>13} {'latency':>7}  "
          f"{'outcome':<16} {'candidate':<10}", file=out)
    for r in rows:
        print(_row_line(r), file=out)


def show(r: Any, out: TextIO, sections: bool = False) -> None:
    print(f"conversation {r['id']}: {r['kind']} request to {r['endpoint']} ({r['model']}) on {r['shape']} {r['layout']} "
          f"{r['gpu']}", file=out)
    print(f"parent {r['parent'] or '-'} -> candidate {r['candidate'] or '-'} ({r['outcome']}"
          + (f": {r['detail']}" if r["detail"] else "") + ")", file=out)
    print(f"tokens {r['tokens_in']} in / {r['tokens_out']} out{' (estimated)' if r['estimated'] else ''}, "
          f"latency {float(r['latency_s'] or 0):.2f} s, {r['attempts']} attempt(s), prompt {r['prompt_chars']} chars", file=out)
    sizes = json.loads(r["sections"] or "{}") if r["sections"] else {}
    if sizes:
        parts = ", ".join(f"{k} {v}" for k, v in sizes.items() if isinstance(v, int) and k not in ("total", "tokens_est", "budget_tokens"))
        print(f"prompt size: ~{sizes.get('tokens_est', 0)} tokens (budget {sizes.get('budget_tokens', 0)}), "
              f"{sizes.get('total', 0)} chars" + (f"; cut to fit: {', '.join(sizes['cut'])}" if sizes.get("cut") else ""), file=out)
        if sections:
            print(f"sections (chars): {parts}", file=out)
    for m in json.loads(r["messages"] or "[]"):
        print(f"\n===== {m.get('role', '?')} =====\n{m.get('content', '')}", file=out)
    print(f"\n===== reply =====\n{r['reply'] or '(no reply: ' + (r['detail'] or r['outcome'] or '') + ')'}", file=out)


@cli_entry
def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # `... | head`: the reader has all it wanted
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str] | None) -> int:
    from .cli import _Parser

    ap = _Parser(prog="python -m evo.conversations", description="LLM conversations kept in the archive.")
    ap.add_argument("--db", default="", help="the archive (default: paths.db of the config, .evo/evo.db)")
    ap.add_argument("--config", help="YAML file overriding evo/defaults.yaml")
    ap.add_argument("--candidate", help="show the conversation(s) that produced this candidate (hash or prefix)")
    ap.add_argument("--shape", help="with list: only this shape (MxNxK)")
    ap.add_argument("--last", type=int, default=0, help="with list: only the last N")
    ap.add_argument("--sections", action="store_true", help="with show: the prompt's size per section")
    ap.add_argument("command", nargs="?", choices=["list", "show"], help="list (default) or show ID")
    ap.add_argument("id", nargs="?", help="with show: the conversation id")
    args = ap.parse_args(argv)
    from .cli import require_positive
    from .problem import parse_shape

    require_positive(args.last, "--last")
    shape = parse_shape(args.shape).key if args.shape else ""  # a malformed shape: one line, not an empty list
    db = args.db
    if not db:
        from .config import load_config

        db = load_config(args.config).paths.db
    from pathlib import Path

    if not Path(db).is_file():
        raise EvoError(f"no archive at {db} (pass --db)")
    store = Store(db)
    out = sys.stdout
    if args.candidate:
        rows = store.conversations(candidate=args.candidate.strip())
        if not rows:
            raise EvoError(f"no conversation produced a candidate {args.candidate!r} in {db}")
        for r in rows:
            show(r, out, args.sections)
        return 0
    if args.command == "show":
        if not args.id or not args.id.isdigit():
            raise EvoError("show needs a conversation id (see: python -m evo.conversations list)")
        r = store.conversation(int(args.id))
        if r is None:
            raise EvoError(f"no conversation {args.id} in {db}")
        show(r, out, args.sections)
        return 0
    list_rows(store.conversations(shape=shape, limit=args.last), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
