"""Sweeps over several hosts with Ray: the head keeps the single SQLite archive, GPU nodes search shapes.

    ray start --head                        # on the head node (also starts its GPUs as workers)
    ray start --address HEAD:6379           # on each GPU node
    python -m evo.sweep --ray --shapes shapes/grid1000.yaml --budget-minutes-per-shape 2     # on the head

One Ray actor per GPU (``num_gpus=1``) keeps a started GPU worker and a local archive in a temporary folder.
For each shape the head sends the actor the winners of the nearest searched shapes (the seeds) and every row
the head already holds for that shape (so an interrupted shape resumes wherever it runs); the actor searches
and returns the rows it produced (candidates, compiles, evaluations, baselines, ceilings, confirms, runs),
which the head merges into its archive in one transaction. The head's archive is the only source of truth;
the node archives are scratch. Needs ``pip install -e .[ray]`` on every node; local runs need no Ray.
"""
from __future__ import annotations

import socket
import tempfile
from pathlib import Path
from typing import Any, Callable

from .compile_ahead import AheadCounts
from .config import Config, load_config
from .errors import EvoError, NoGpuError
from .kernel import KernelSource
from .problem import GpuInfo, Problem
from .store import Store

# (table, how rows coming from elsewhere are merged): results measured once stay, fresh measurements replace
_MERGE = (("candidates", "OR IGNORE"), ("compiles", "OR IGNORE"), ("evaluations", "OR REPLACE"),
          ("baselines", "OR IGNORE"), ("ceilings", "OR IGNORE"), ("confirms", "OR REPLACE"))

Rows = dict[str, dict[str, list]]


def _select(store: Store, sql: str, args: tuple = ()) -> dict[str, list]:
    cur = store.db.execute(sql, args)
    return {"columns": [d[0] for d in cur.description], "rows": [tuple(r) for r in cur]}


def _in(values: list) -> str:
    return ",".join("?" * len(values)) or "NULL"


def export_rows(store: Store, shape: str, layout: str, gpu: str, extra_hashes: tuple | list | set = (),
                run_ids: list[int] | None = None) -> Rows:
    """Every row about one (shape, layout, GPU): with run_ids, only what those runs produced (plus the runs)."""
    if run_ids is None:
        ev = _select(store, "SELECT * FROM evaluations WHERE shape=? AND layout=? AND gpu=?", (shape, layout, gpu))
        conf = _select(store, "SELECT * FROM confirms WHERE shape=? AND layout=? AND gpu=?", (shape, layout, gpu))
        runs = _select(store, "SELECT * FROM runs WHERE 0")
    else:
        ids = list(run_ids)
        ev = _select(store, f"SELECT * FROM evaluations WHERE shape=? AND layout=? AND gpu=? AND run_id IN ({_in(ids)})",
                     (shape, layout, gpu, *ids))
        conf = _select(store, f"SELECT * FROM confirms WHERE shape=? AND layout=? AND gpu=? AND run_id IN ({_in(ids)})",
                       (shape, layout, gpu, *ids))
        runs = _select(store, f"SELECT * FROM runs WHERE id IN ({_in(ids)})", tuple(ids))
    h_col = ev["columns"].index("hash")
    hashes = sorted({r[h_col] for r in ev["rows"]} | set(extra_hashes))
    out: Rows = {
        "candidates": _select(store, f"SELECT * FROM candidates WHERE hash IN ({_in(hashes)})", tuple(hashes)),
        "compiles": _select(store, f"SELECT * FROM compiles WHERE hash IN ({_in(hashes)})", tuple(hashes)),
        "evaluations": ev,
        "baselines": _select(store, "SELECT * FROM baselines WHERE shape=? AND layout=? AND gpu=?", (shape, layout, gpu)),
        "ceilings": _select(store, "SELECT * FROM ceilings WHERE gpu=?", (gpu,)),
        "confirms": conf,
        "runs": runs,
    }
    return out


def merge_rows(store: Store, rows: Rows) -> dict[str, int]:
    """Merge rows from another archive in one transaction; runs get fresh ids here (and their rows follow)."""
    db = store.db
    counts: dict[str, int] = {}
    db.execute("BEGIN IMMEDIATE")
    try:
        remap: dict[int, int] = {}
        runs = rows.get("runs") or {"columns": [], "rows": []}
        for r in runs["rows"]:
            d = dict(zip(runs["columns"], r))
            old = d.pop("id")
            cur = db.execute(f"INSERT INTO runs ({', '.join(d)}) VALUES ({_in(list(d))})", tuple(d.values()))
            remap[old] = int(cur.lastrowid)
        counts["runs"] = len(remap)
        for table, verb in _MERGE:
            part = rows.get(table)
            if not part or not part["rows"]:
                continue
            cols = part["columns"]
            data = part["rows"]
            if remap and "run_id" in cols:
                i = cols.index("run_id")
                data = [tuple(remap.get(v, v) if j == i else v for j, v in enumerate(r)) for r in data]
            db.executemany(f"INSERT {verb} INTO {table} ({', '.join(cols)}) VALUES ({_in(cols)})", data)
            counts[table] = len(data)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return counts


class ShapeSearcher:
    """A Ray actor on a GPU node: one started GPU worker, a scratch archive, one shape's search per call."""

    def __init__(self, cfg_dict: dict, worker_factory: Callable | None = None, compiler: Any = None, workdir: str = ""):
        from .compile import Compiler
        from .gpu.worker import GpuWorker

        self.dir = Path(workdir or tempfile.mkdtemp(prefix="evo-ray-"))
        cfg_dict = dict(cfg_dict)
        cfg_dict["paths"] = dict(cfg_dict["paths"], db=str(self.dir / "evo.db"), out=str(self.dir / "out"))
        self.cfg: Config = load_config(overrides=cfg_dict)
        self.worker = (worker_factory or GpuWorker)(self.cfg, 0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
        self.compiler = compiler or Compiler.from_config(self.cfg.compile)
        self.info: GpuInfo = self.worker.start()
        self.name = socket.gethostname().split(".")[0][:16]
        from .space import Enumerations

        self.enumerations = Enumerations()  # each family's space enumerated once for the actor's shapes
        from .cost_model import SharedModel

        self.shared_model = SharedModel(self.cfg.search.cost_model_regrow)  # the cost model, trained again as the archive grows

    def gpu_info(self) -> GpuInfo:
        return self.info

    def search(self, problem: Problem, seeds: list[str], prior: Rows) -> tuple[Any, Rows, str]:
        from .sweep import search_shape

        store = Store(self.cfg.paths.db)
        try:
            merge_rows(store, prior)
            before = store.db.execute("SELECT COALESCE(MAX(id), 0) FROM runs").fetchone()[0]
            log_dir = self.dir / "logs"
            res = search_shape(problem, self.cfg, self.worker, self.compiler, log_dir, self.name, seeds=seeds,
                               enumerations=self.enumerations, shared_model=self.shared_model)
            ids = [r[0] for r in store.db.execute("SELECT id FROM runs WHERE id>? AND shape=?", (before, problem.key))]
            rows = export_rows(store, problem.key, problem.layout, self.info.key, run_ids=ids)
            log = log_dir / f"{self.info.key}_{problem.key}.log"
            text = log.read_text() if log.is_file() else ""
        finally:
            store.close()
        return res, rows, text

    def close(self) -> None:
        self.worker.stop()


def import_ray():
    try:
        import ray  # type: ignore
    except ImportError:
        raise EvoError("--ray needs Ray: pip install -e '.[ray]' (on the head and every GPU node)") from None
    return ray


RAY_CONNECT_TIMEOUT_S = 10.0


def probe(address: str, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """EvoError within timeout_s where nothing listens at host:port (ray.init itself retries for many minutes)."""
    host, _, port = address.rpartition(":")
    host = host.split("://")[-1].strip("[]")
    try:
        port_n = int(port)
    except ValueError:
        raise EvoError(f"--ray-address {address!r} is not HOST:PORT (e.g. 10.0.0.1:6379)") from None
    try:
        with socket.create_connection((host or "127.0.0.1", port_n), timeout=timeout_s):
            pass
    except OSError as e:
        why = "timed out" if isinstance(e, socket.timeout) else (e.strerror or type(e).__name__)
        raise EvoError(f"cannot reach a Ray cluster at {address} ({why} within {timeout_s:.0f} s); start one with "
                       "`ray start --head` or fix --ray-address") from None


def connect_ray(ray: Any, address: str | None) -> None:
    """ray.init on an existing cluster, or one line (EvoError) saying why not."""
    if address and address != "auto" and not address.startswith("ray://"):
        probe(address)
    try:
        ray.init(address=address or "auto", log_to_driver=False)
    except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError, ValueError from Ray: one line
        first = " ".join(str(e).split())[:200] or type(e).__name__
        hint = "" if address else "; start one with `ray start --head` (and `ray start --address HEAD:6379` on GPU nodes)"
        raise EvoError(f"cannot connect to a Ray cluster at {address or 'auto'}: {first}{hint}") from None


class RayBackend:
    """The sweep's backend on a Ray cluster: one actor per GPU, the head merges every shape's rows."""

    def __init__(self, cfg: Config, worker_factory: Callable | None, compiler: Any, address: str | None = None,
                 actors: int = 0, gpus_per_actor: float = 1.0):
        self.cfg, self.worker_factory, self.compiler = cfg, worker_factory, compiler
        self.address, self.n_actors, self.gpus_per_actor = address, actors, gpus_per_actor
        self.ray = import_ray()
        self.actors: list = []
        self.infos: list[GpuInfo] = []
        self.idle: list[int] = []
        self.pending: dict[Any, tuple[int, Problem]] = {}
        self.slots = self.n_gpus = 0
        self.store: Store | None = None
        self.gpu = ""
        self.log_dir = Path(cfg.paths.db).parent / "sweep_logs"
        self._owns_ray = False
        self.next_of: dict[str, list[Problem]] = {}  # set by the sweep like any backend's; the actors do not compile ahead

    def ahead_counts(self) -> AheadCounts:
        """Nothing compiled ahead: the actors compile as they search."""
        return AheadCounts()

    def start(self) -> list[GpuInfo]:
        ray = self.ray
        if not ray.is_initialized():
            connect_ray(ray, self.address)
            self._owns_ray = True
        n = self.n_actors
        if not n:
            gpus = ray.cluster_resources().get("GPU", 0)
            n = int(gpus // self.gpus_per_actor) if self.gpus_per_actor else 0
        if n < 1:
            raise NoGpuError("the Ray cluster has no GPU (start GPU nodes with `ray start --address HEAD:6379`)")
        d = self.cfg.to_dict()
        # paths the nodes share with the head (compile cache, templates) are made absolute here
        d["compile"] = dict(d["compile"], cache_dir=str(Path(d["compile"]["cache_dir"]).resolve()))
        if d["paths"]["templates"]:
            d["paths"] = dict(d["paths"], templates=str(Path(d["paths"]["templates"]).resolve()))
        actor_cls = ray.remote(num_gpus=self.gpus_per_actor)(ShapeSearcher)
        self.actors = [actor_cls.remote(d, self.worker_factory, self.compiler) for _ in range(n)]
        self.infos = ray.get([a.gpu_info.remote() for a in self.actors])
        self.idle = list(range(n))
        self.slots = self.n_gpus = n
        return self.infos

    def attach(self, store: Store, gpu: str) -> None:
        self.store, self.gpu = store, gpu

    def submit(self, problem: Problem) -> None:
        from .proposers.neighbours import neighbour_seeds

        assert self.store is not None
        i = self.idle.pop()
        info = self.infos[i]
        seeds = neighbour_seeds(self.store, problem, info.key, info.arch, info.sm_count, self.cfg.search.seed_winners)
        prior = export_rows(self.store, problem.key, problem.layout, info.key,
                            extra_hashes={KernelSource.parse(s).hash for s in seeds})
        ref = self.actors[i].search.remote(problem, seeds, prior)
        self.pending[ref] = (i, problem)

    def next_result(self):
        from .sweep import ShapeResult

        ray = self.ray
        ready, _ = ray.wait(list(self.pending), num_returns=1)
        ref = ready[0]
        i, problem = self.pending.pop(ref)
        try:
            res, rows, log = ray.get(ref)
        except ray.exceptions.RayActorError as e:
            self.slots -= 1  # that node is gone; the others carry on
            return ShapeResult(problem.key, problem.layout, self.gpu, "failed", worker=f"actor{i}",
                               error=f"the Ray actor died: {str(e).splitlines()[0][:200]}")
        except Exception as e:  # noqa: BLE001
            self.idle.append(i)
            return ShapeResult(problem.key, problem.layout, self.gpu, "failed", worker=f"actor{i}",
                               error=" ".join(f"{type(e).__name__}: {e}".split())[:300])
        self.idle.append(i)
        assert self.store is not None
        merge_rows(self.store, rows)
        if log:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            (self.log_dir / f"{res.gpu}_{problem.key}.log").write_text(log)
        return res

    def stop(self) -> None:
        ray = self.ray
        if self.actors:
            try:
                ray.get([a.close.remote() for a in self.actors], timeout=30)
            except Exception:  # noqa: BLE001
                pass
            for a in self.actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001
                    pass
            self.actors = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False
