"""The archive: every candidate, compile, evaluation and baseline in one SQLite file.

Each result is committed as soon as it exists, so a killed run loses nothing and a
rerun resumes. WAL journaling keeps the file consistent under SIGKILL.
"""
from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

from .errors import EvoError
from .kernel import KernelSource
from .records import BaselineResult, CompileResult, EvalResult, Individual

APP_ID = 0x45564F31  # "EVO1", stored in SQLite's application_id header field
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    hash TEXT PRIMARY KEY, family TEXT, params TEXT, source TEXT,
    parent TEXT, proposer TEXT, idea TEXT, model TEXT, created REAL);
CREATE TABLE IF NOT EXISTS compiles (
    hash TEXT, arch TEXT, ok INTEGER, error TEXT, log TEXT, registers INTEGER,
    smem_static INTEGER, spill_bytes INTEGER, stack_bytes INTEGER, seconds REAL,
    cubin_path TEXT, created REAL, PRIMARY KEY (hash, arch));
CREATE TABLE IF NOT EXISTS evaluations (
    hash TEXT, shape TEXT, layout TEXT, gpu TEXT, ok INTEGER, stage TEXT, error TEXT,
    time_us REAL, spread REAL, cublas_us REAL, rel_err REAL, seconds REAL,
    cuda TEXT, driver TEXT, run_id INTEGER, created REAL, measured_us REAL, gpu_state TEXT,
    PRIMARY KEY (hash, shape, layout, gpu));
CREATE TABLE IF NOT EXISTS baselines (
    shape TEXT, layout TEXT, gpu TEXT, library TEXT, time_us REAL, spread REAL,
    detail TEXT, created REAL, PRIMARY KEY (shape, layout, gpu, library));
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, shape TEXT, gpu TEXT, started REAL,
    finished REAL, status TEXT, config TEXT, summary TEXT);
CREATE TABLE IF NOT EXISTS ceilings (
    gpu TEXT PRIMARY KEY, peak_tflops REAL, bw_gbs REAL, detail TEXT, created REAL);
CREATE TABLE IF NOT EXISTS confirms (
    shape TEXT, layout TEXT, gpu TEXT, hash TEXT, time_us REAL, spread REAL,
    baselines TEXT, run_id INTEGER, created REAL, PRIMARY KEY (shape, layout, gpu));
CREATE INDEX IF NOT EXISTS eval_shape ON evaluations (shape, layout, gpu, ok, time_us);
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, created REAL, shape TEXT, layout TEXT, gpu TEXT, kind TEXT,
    endpoint TEXT, model TEXT, parent TEXT, candidate TEXT, outcome TEXT, detail TEXT, messages TEXT,
    reply TEXT, tokens_in INTEGER, tokens_out INTEGER, estimated INTEGER, latency_s REAL, attempts INTEGER,
    prompt_chars INTEGER, sections TEXT);
CREATE INDEX IF NOT EXISTS conversation_candidate ON conversations (candidate);
CREATE TABLE IF NOT EXISTS profiles (
    hash TEXT, shape TEXT, layout TEXT, gpu TEXT, ok INTEGER, kernel TEXT, metrics TEXT, detail TEXT,
    command TEXT, seconds REAL, created REAL, PRIMARY KEY (hash, shape, layout, gpu));
"""


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        folder = self.path.parent
        if not folder.is_dir():  # one missing level (.evo) is made; a path into nowhere is refused, nothing created
            if not folder.parent.is_dir():
                raise EvoError(f"cannot create the archive {self.path}: {folder.parent} does not exist "
                               "(create it, or pass --db elsewhere)")
            folder.mkdir(exist_ok=True)
        fresh = not self.path.exists() or self.path.stat().st_size == 0
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            app_id = self.db.execute("PRAGMA application_id").fetchone()[0]
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise EvoError(f"{self.path} is not an evo database ({e}); move it away or pass --db elsewhere") from None
        if not fresh and app_id != APP_ID:
            if tables or app_id:
                raise EvoError(f"{self.path} is a database of another program; refusing to touch it (pass --db elsewhere)")
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            # marked as evo's before its tables exist: a process opening the archive while this one creates it sees
            # evo's mark (and creates the missing tables too), never tables without the mark
            self.db.execute(f"PRAGMA application_id={APP_ID}")
            self.db.executescript(_SCHEMA)
            self._add_missing_columns()
            self.db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        except sqlite3.OperationalError as e:
            raise EvoError(f"cannot write the database {self.path}: {e}") from None

    def _add_missing_columns(self) -> None:
        """Columns added after an archive was created (an older archive gains them, empty)."""
        have = {r[1] for r in self.db.execute("PRAGMA table_info(evaluations)")}
        if "measured_us" not in have:  # the raw median where time_us was scaled for timing drift (evo/drift.py)
            self.db.execute("ALTER TABLE evaluations ADD COLUMN measured_us REAL")
        if "gpu_state" not in have:  # what the GPU reported after a window where it ran slow (evo/gpu/gpu_state.py)
            self.db.execute("ALTER TABLE evaluations ADD COLUMN gpu_state TEXT")

    def close(self) -> None:
        self.db.close()

    def _exec(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        try:
            return self.db.execute(sql, args)
        except sqlite3.OperationalError as e:
            if "disk" in str(e) or "full" in str(e):
                raise EvoError(f"cannot write {self.path}: {e} (disk full?); results so far are kept") from None
            raise

    # candidates -----------------------------------------------------------
    def add_candidate(self, ks: KernelSource, parent: str = "", proposer: str = "", idea: str = "", model: str = "") -> bool:
        """Store a candidate; False if the same (normalised) source is already stored."""
        cur = self._exec(
            "INSERT OR IGNORE INTO candidates VALUES (?,?,?,?,?,?,?,?,?)",
            (ks.hash, ks.meta.family, json.dumps(ks.meta.params, sort_keys=True), ks.text, parent, proposer, idea, model, time.time()),
        )
        return cur.rowcount > 0

    def has_candidate(self, h: str) -> bool:
        return self._exec("SELECT 1 FROM candidates WHERE hash=?", (h,)).fetchone() is not None

    def candidate(self, h: str) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM candidates WHERE hash=?", (h,)).fetchone()

    # compiles -------------------------------------------------------------
    def add_compile(self, r: CompileResult) -> None:
        self._exec(
            "INSERT OR REPLACE INTO compiles VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (r.hash, r.arch, int(r.ok), r.error, r.log, r.registers, r.smem_static, r.spill_bytes, r.stack_bytes,
             r.seconds, r.cubin_path, time.time()),
        )

    def compile_seconds(self, arch: str) -> dict[str, float]:
        """Median nvcc seconds of one instance per family on this arch, over the compiles stored with a time: what a
        search uses to start the quick compiles first."""
        by: dict[str, list[float]] = {}
        for fam, sec in self._exec("SELECT k.family, c.seconds FROM compiles c JOIN candidates k ON k.hash = c.hash "
                                   "WHERE c.arch=? AND c.seconds > 0", (arch,)).fetchall():
            by.setdefault(fam, []).append(float(sec))
        return {f: sorted(v)[len(v) // 2] for f, v in by.items()}

    def compile_result(self, h: str, arch: str) -> CompileResult | None:
        row = self._exec("SELECT * FROM compiles WHERE hash=? AND arch=?", (h, arch)).fetchone()
        if row is None:
            return None
        return CompileResult(hash=row["hash"], arch=row["arch"], ok=bool(row["ok"]), cubin_path=row["cubin_path"] or "",
                             log=row["log"] or "", registers=row["registers"], smem_static=row["smem_static"],
                             spill_bytes=row["spill_bytes"], stack_bytes=row["stack_bytes"], seconds=row["seconds"],
                             error=row["error"] or "", cached=True)

    # evaluations ----------------------------------------------------------
    def add_evaluation(self, shape: str, layout: str, gpu: str, r: EvalResult, cuda: str = "", driver: str = "", run_id: int = 0) -> None:
        self._exec(
            "INSERT OR REPLACE INTO evaluations (hash, shape, layout, gpu, ok, stage, error, time_us, spread, cublas_us, "
            "rel_err, seconds, cuda, driver, run_id, created, measured_us, gpu_state) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (r.hash, shape, layout, gpu, int(r.ok), r.stage, r.error, r.time_us, r.spread, r.cublas_us,
             r.check.rel_err if r.check else None, r.seconds, cuda, driver, run_id, time.time(), r.measured_us or None,
             r.gpu_state or None),
        )

    def evaluated(self, h: str, shape: str, layout: str, gpu: str) -> bool:
        q = "SELECT 1 FROM evaluations WHERE hash=? AND shape=? AND layout=? AND gpu=?"
        return self._exec(q, (h, shape, layout, gpu)).fetchone() is not None

    def individuals(self, shape: str, layout: str, gpu: str, arch: str) -> list[Individual]:
        """Every candidate evaluated on this problem (compile failures are recorded per problem too)."""
        q = """
        SELECT c.*, e.ok AS eok, e.time_us, e.cublas_us, e.error AS eerr,
               k.ok AS cok, k.error AS kerr, k.registers, k.smem_static, k.log AS klog
        FROM candidates c
        LEFT JOIN evaluations e ON e.hash=c.hash AND e.shape=? AND e.layout=? AND e.gpu=?
        LEFT JOIN compiles k ON k.hash=c.hash AND k.arch=?
        WHERE e.hash IS NOT NULL
        """
        out = []
        for r in self._exec(q, (shape, layout, gpu, arch)):
            compiled = None if r["cok"] is None else bool(r["cok"])
            correct = None if r["eok"] is None else bool(r["eok"])
            out.append(Individual(
                hash=r["hash"], family=r["family"], params=json.loads(r["params"] or "{}"), source=r["source"],
                parent=r["parent"] or "", proposer=r["proposer"] or "", idea=r["idea"] or "",
                compiled=compiled, correct=correct, time_us=r["time_us"] or 0.0, cublas_us=r["cublas_us"] or 0.0,
                error=(r["eerr"] or r["kerr"] or ""), registers=r["registers"] or 0, smem=r["smem_static"] or 0,
                compile_log=(r["klog"] or "") if compiled is False else "",
            ))
        out.sort(key=lambda i: (-i.fitness, i.hash))
        return out

    def best(self, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        rows = self.fastest(shape, layout, gpu, 1)
        return rows[0] if rows else None

    def fastest(self, shape: str, layout: str, gpu: str, n: int, run_id: int | None = None) -> list[sqlite3.Row]:
        """The n correct kernels of a problem with the lowest stored times, fastest first, or of those measured in
        one run: best() is the first; the first few are the contenders of a search's final side-by-side runoff."""
        q = """SELECT e.*, c.family, c.params, c.source, c.parent, c.proposer FROM evaluations e
               JOIN candidates c ON c.hash=e.hash
               WHERE e.shape=? AND e.layout=? AND e.gpu=? AND e.ok=1""" + (" AND e.run_id=?" if run_id is not None else "") + """
               ORDER BY e.time_us LIMIT ?"""
        args = (shape, layout, gpu) + ((run_id,) if run_id is not None else ()) + (max(0, int(n)),)
        return list(self._exec(q, args).fetchall())

    def champion(self, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        """The vetted, side-by-side re-timed winner of a problem (what the kernel table publishes)."""
        conf = self.confirm(shape, layout, gpu)
        return self.kernel_row(conf["hash"], shape, layout, gpu) if conf is not None else None

    def kernel_row(self, h: str, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        """Like best(), for one given kernel; None unless it is stored as correct on this problem."""
        q = """SELECT e.*, c.family, c.params, c.source, c.parent, c.proposer FROM evaluations e
               JOIN candidates c ON c.hash=e.hash
               WHERE e.hash=? AND e.shape=? AND e.layout=? AND e.gpu=? AND e.ok=1"""
        return self._exec(q, (h, shape, layout, gpu)).fetchone()

    def counts(self, shape: str, layout: str, gpu: str, arch: str) -> dict[str, int]:
        q = """SELECT
            (SELECT COUNT(*) FROM compiles k JOIN candidates c ON c.hash=k.hash WHERE k.arch=? AND k.ok=1
                AND c.hash IN (SELECT hash FROM evaluations WHERE shape=? AND layout=? AND gpu=?)) AS compiled,
            (SELECT COUNT(*) FROM evaluations WHERE shape=? AND layout=? AND gpu=? AND ok=1) AS correct,
            (SELECT COUNT(*) FROM evaluations WHERE shape=? AND layout=? AND gpu=? AND ok=0) AS rejected"""
        r = self._exec(q, (arch, shape, layout, gpu) + (shape, layout, gpu) * 2).fetchone()
        return dict(r)

    # baselines ------------------------------------------------------------
    def add_baseline(self, shape: str, layout: str, gpu: str, b: BaselineResult) -> None:
        self._exec("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?,?,?,?)",
                   (shape, layout, gpu, b.library, b.time_us, b.spread, b.detail, time.time()))

    def baselines(self, shape: str, layout: str, gpu: str) -> list[BaselineResult]:
        rows = self._exec("SELECT * FROM baselines WHERE shape=? AND layout=? AND gpu=? ORDER BY library", (shape, layout, gpu))
        return [BaselineResult(r["library"], r["time_us"], r["spread"], r["detail"] or "") for r in rows]

    # ceilings (measured peak matmul rate and copy bandwidth of a GPU) -----
    def set_ceilings(self, gpu: str, peak_tflops: float, bw_gbs: float, detail: str = "") -> None:
        self._exec("INSERT OR REPLACE INTO ceilings VALUES (?,?,?,?,?)", (gpu, peak_tflops, bw_gbs, detail, time.time()))

    def ceilings(self, gpu: str) -> tuple[float, float] | None:
        r = self._exec("SELECT peak_tflops, bw_gbs FROM ceilings WHERE gpu=?", (gpu,)).fetchone()
        return (r[0], r[1]) if r else None

    # confirms: the winner re-timed side by side with every baseline ----------
    def set_confirm(self, shape: str, layout: str, gpu: str, h: str, time_us: float, spread: float,
                    baselines: dict[str, float], run_id: int = 0) -> None:
        self._exec("INSERT OR REPLACE INTO confirms VALUES (?,?,?,?,?,?,?,?,?)",
                   (shape, layout, gpu, h, time_us, spread, json.dumps(baselines), run_id, time.time()))

    def confirm(self, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM confirms WHERE shape=? AND layout=? AND gpu=?", (shape, layout, gpu)).fetchone()

    # runs -----------------------------------------------------------------
    def start_run(self, shape: str, gpu: str, config: dict[str, Any]) -> int:
        cur = self._exec("INSERT INTO runs (shape, gpu, started, status, config) VALUES (?,?,?,?,?)",
                         (shape, gpu, time.time(), "running", json.dumps(config, default=str)))
        return int(cur.lastrowid)

    def finish_run(self, run_id: int, status: str, summary: dict[str, Any]) -> None:
        self._exec("UPDATE runs SET finished=?, status=?, summary=? WHERE id=?",
                   (time.time(), status, json.dumps(summary, default=str), run_id))

    # conversations: every LLM request, its reply and what became of it ----------
    CONVERSATION_FIELDS = ("shape", "layout", "gpu", "kind", "endpoint", "model", "parent", "candidate", "outcome",
                           "detail", "messages", "reply", "tokens_in", "tokens_out", "estimated", "latency_s",
                           "attempts", "prompt_chars", "sections")

    def add_conversation(self, **fields: Any) -> int:
        """Store one LLM conversation (fields: CONVERSATION_FIELDS; messages and sections may be lists/dicts)."""
        unknown = set(fields) - set(self.CONVERSATION_FIELDS)
        if unknown:
            raise ValueError(f"unknown conversation field {', '.join(sorted(unknown))}")
        vals = [fields.get(k) for k in self.CONVERSATION_FIELDS]
        vals = [json.dumps(v) if isinstance(v, (list, dict)) else v for v in vals]
        cols = ", ".join(("created",) + self.CONVERSATION_FIELDS)
        cur = self._exec(f"INSERT INTO conversations ({cols}) VALUES ({', '.join('?' * (len(vals) + 1))})",
                         (time.time(), *vals))
        return int(cur.lastrowid)

    def conversation(self, cid: int) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM conversations WHERE id=?", (int(cid),)).fetchone()

    def conversations(self, candidate: str = "", shape: str = "", limit: int = 0) -> list[sqlite3.Row]:
        """Newest last; candidate may be a hash prefix."""
        q, args = "SELECT * FROM conversations WHERE 1=1", []
        if candidate:
            q += " AND candidate LIKE ?"
            args.append(candidate + "%")
        if shape:
            q += " AND shape=?"
            args.append(shape)
        q += " ORDER BY id"
        rows = list(self._exec(q, tuple(args)))
        return rows[-limit:] if limit else rows

    def conversation_ids(self, hashes: list[str]) -> dict[str, int]:
        """candidate hash -> id of the conversation that produced it (the latest)."""
        out: dict[str, int] = {}
        for h in hashes:
            r = self._exec("SELECT MAX(id) FROM conversations WHERE candidate=?", (h,)).fetchone()
            if r and r[0]:
                out[h] = int(r[0])
        return out

    # profiles: Nsight Compute metrics of a kernel on a problem (evo.profile) -------
    def set_profile(self, h: str, shape: str, layout: str, gpu: str, ok: bool, kernel: str, metrics: dict,
                    detail: str = "", command: str = "", seconds: float = 0.0) -> None:
        self._exec("INSERT OR REPLACE INTO profiles VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                   (h, shape, layout, gpu, int(ok), kernel, json.dumps(metrics), detail, command, seconds, time.time()))

    def profile(self, h: str, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM profiles WHERE hash=? AND shape=? AND layout=? AND gpu=?",
                          (h, shape, layout, gpu)).fetchone()

    def evaluation(self, h: str, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        return self._exec("SELECT * FROM evaluations WHERE hash=? AND shape=? AND layout=? AND gpu=?",
                          (h, shape, layout, gpu)).fetchone()

    def best_of_family(self, family: str, shape: str, layout: str, gpu: str) -> sqlite3.Row | None:
        q = """SELECT e.*, c.family, c.params, c.source, c.idea FROM evaluations e JOIN candidates c ON c.hash=e.hash
               WHERE c.family=? AND e.shape=? AND e.layout=? AND e.gpu=? AND e.ok=1 ORDER BY e.time_us LIMIT 1"""
        return self._exec(q, (family, shape, layout, gpu)).fetchone()

    def lineage_rows(self, shape: str, layout: str, gpu: str) -> list[sqlite3.Row]:
        """Every candidate evaluated on this problem with its parent, proposer, idea and outcome, oldest first."""
        q = """SELECT c.hash, c.family, c.params, c.parent, c.proposer, c.idea, c.model, e.ok, e.stage, e.error,
                      e.time_us, e.created FROM candidates c JOIN evaluations e ON e.hash=c.hash
               WHERE e.shape=? AND e.layout=? AND e.gpu=? ORDER BY e.created"""
        return list(self._exec(q, (shape, layout, gpu)))

    def best_so_far(self, shape: str, layout: str, gpu: str) -> list[tuple[float, float]]:
        """(GPU-seconds of evaluation so far, best time so far) at every improvement of a problem's best, in the
        order measured: the search's convergence curve (evaluation seconds summed over every run on the shape)."""
        q = """SELECT ok, time_us, seconds FROM evaluations WHERE shape=? AND layout=? AND gpu=? ORDER BY created, rowid"""
        out: list[tuple[float, float]] = []
        spent, best = 0.0, 0.0
        for ok, t, sec in self._exec(q, (shape, layout, gpu)):
            spent += sec or 0.0
            if ok and t and t > 0 and (not best or t < best):
                best = t
                out.append((round(spent, 3), t))
        return out

    def rows(self, sql: str, args: tuple = ()) -> Iterator[sqlite3.Row]:
        yield from self._exec(sql, args)
