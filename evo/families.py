"""Kernel families: a parameterised .cu template plus its parameter space.

A family is a folder ``templates/<name>/`` holding

* ``family.yaml``::

      name: mma_sm80
      description: one line
      archs: [sm_80, sm_90a]          # every arch the family claims to compile for
      source: kernel.cu               # the template
      params:                         # name -> list of allowed values (first = default)
        BM: [128, 64, 256]
        STAGES: [3, 2, 4, 5]
      constraints:                    # expressions over params that a valid instance satisfies
        - "BM * BK / 8 % THREADS == 0"
      ci_instances:                   # extra instances compiled in CI besides the default
        - {BM: 64, BN: 64}
      starts:                         # known-good instances every search evaluates first (with the default)
        - {BM: 128, STAGES: 4}
      library_tiles:                  # optional: cuBLASLt's algorithm for the shape as instances, timed as seeds
        - {BM: "TN", BN: "TM", STAGES: [4, 3]}   # TM x TN: its tile (column-major view), CM x CN: cluster, SPLIT

* ``kernel.cu``: a complete candidate (front matter included, see evo.kernel) in which
  ``{{NAME}}`` is replaced by the value of parameter NAME and ``{{PARAMS}}`` by the
  YAML flow mapping of all parameters.

A family whose template uses ``{{M}}``, ``{{N}}`` or ``{{K}}`` compiles the problem's shape in
(no runtime divisions, loops of known trip count): it is rendered for one problem
(``render(params, problem)``), and its front matter's ``requires`` should pin that shape. Its
``family.yaml`` names the shape its CI instances are rendered for (``ci_shape: 128x64x512``).
"""
from __future__ import annotations

import ast
import functools
import itertools
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

from . import expr
from .errors import EvoError
from .kernel import KernelSource
from .problem import Problem, parse_shape

SHAPE_KEYS = ("M", "N", "K")  # template placeholders of a shape-specialized family; never parameter names


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    archs: tuple[str, ...]
    space: dict[str, tuple]
    constraints: tuple[str, ...]
    template: str
    ci_instances: tuple[dict, ...]
    path: Path
    starts: tuple[dict, ...] = ()
    ci_shape: str = ""
    library_tiles: tuple[dict, ...] = ()  # the library's algorithm as instances: values are expressions or preferences
    compile_s: float = 0.0  # nvcc seconds of one instance, as measured: the search's estimate before its archive has one

    @staticmethod
    def load(folder: Path) -> "Family":
        spec_path = folder / "family.yaml"
        try:
            spec = yaml.safe_load(spec_path.read_text())
        except (OSError, yaml.YAMLError) as e:
            raise EvoError(f"family {folder.name}: cannot read family.yaml: {str(e).splitlines()[0]}") from None
        space = {k: tuple(v if isinstance(v, list) else [v]) for k, v in (spec.get("params") or {}).items()}
        reserved = sorted(set(space) & set(SHAPE_KEYS))
        if reserved:
            raise EvoError(f"family {folder.name}: {', '.join(reserved)} name the problem's shape, not a parameter")
        return Family(
            name=spec["name"],
            description=spec.get("description", ""),
            archs=tuple(spec["archs"]),
            space=space,
            constraints=tuple(spec.get("constraints") or ()),
            template=(folder / spec.get("source", "kernel.cu")).read_text(),
            ci_instances=tuple(spec.get("ci_instances") or ()),
            path=folder,
            starts=tuple(spec.get("starts") or ()),
            ci_shape=str(spec.get("ci_shape") or ""),
            library_tiles=tuple(spec.get("library_tiles") or ()),
            compile_s=float(spec.get("compile_s") or 0.0),
        )

    @property
    def shape_specialized(self) -> bool:
        """The template compiles the problem's shape in: render it with a problem."""
        return any("{{" + k + "}}" in self.template for k in SHAPE_KEYS)

    def ci_problem(self) -> Problem | None:
        """The shape CI instances of a shape-specialized family are rendered for (None for the others)."""
        if not self.shape_specialized:
            return None
        if not self.ci_shape:
            raise EvoError(f"family {self.name} compiles the shape in; its family.yaml needs a ci_shape")
        return parse_shape(self.ci_shape)

    def default_params(self) -> dict[str, Any]:
        return {k: v[0] for k, v in self.space.items()}

    def admit(self, params: dict[str, Any]) -> None:
        """Widen the declared space, for this loaded family only, to the values `params` gives its parameters (a trial
        value of a bench run, e.g. one kept out of the search); unknown names stay unknown to `complete`."""
        for k, v in params.items():
            if k in self.space and v not in self.space[k]:
                self.space[k] = tuple(self.space[k]) + (v,)

    def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        """Fill missing parameters with defaults; reject unknown names and values."""
        unknown = set(params) - set(self.space)
        if unknown:
            raise EvoError(f"family {self.name} has no parameter {', '.join(sorted(unknown))}")
        full = self.default_params()
        full.update(params)
        for k, v in full.items():
            if v not in self.space[k]:
                raise EvoError(f"family {self.name}: {k}={v!r} is not one of {list(self.space[k])}")
        return full

    def env(self, params: dict[str, Any], problem: Problem | None = None) -> dict[str, int]:
        """The integer names an expression over these parameters evaluates with: a parameter the set lacks (one from
        before the parameter existed) at its default, as render completes it; with a problem, its M, N and K too."""
        env = _ints({**self.default_params(), **params})
        if problem is not None:
            env.update(M=problem.m, N=problem.n, K=problem.k)
        return env

    def valid(self, params: dict[str, Any]) -> bool:
        env = _ints(params)
        return all(expr.evaluate(c, env) for c in self.constraints)

    def random_params(self, rng: random.Random, tries: int = 200) -> dict[str, Any] | None:
        """A random valid instance: the parameters drawn in space order, each among its values in random order, every
        constraint checked as soon as the parameters it names are drawn (a value that breaks one is replaced, a dead
        end backtracks). Drawing whole points and keeping the valid ones fails where few are valid (wgmma_sm90: 1 in
        2000). Not uniform over the valid points: a value with fewer valid completions is as likely as one with many.
        None when none turns up in `tries` walks (each gives up after 4 draws per parameter)."""
        names = list(self.space)
        if not names:
            return {} if self.valid({}) else None
        checks = _checks_by_depth(tuple(names), tuple(self.constraints))
        budget = 0

        def walk(depth: int, params: dict[str, Any], env: dict[str, int]) -> dict[str, Any] | None:
            nonlocal budget
            name = names[depth]
            order = list(self.space[name])
            rng.shuffle(order)
            for v in order:
                budget -= 1
                if budget < 0:
                    return None
                if not _assign(params, env, name, v, checks[depth]):
                    continue
                found = dict(params) if depth + 1 == len(names) else walk(depth + 1, params, env)
                if found is not None:
                    return found
            del params[name]
            env.pop(name, None)
            return None

        for _ in range(tries):  # restarts: a walk stuck below an early choice with few valid completions gives up soon
            budget = 4 * len(names)
            found = walk(0, {}, {})
            if found is not None:
                return found
        return None

    def render(self, params: dict[str, Any], problem: Problem | None = None) -> KernelSource:
        """The candidate for these parameters; a shape-specialized family needs the problem it is for
        (other families ignore it: one rendering serves every shape its ``requires`` accepts)."""
        full = self.complete(params)
        if not self.valid(full):
            raise EvoError(f"family {self.name}: parameters {full} violate its constraints")
        text = self.template.replace("{{PARAMS}}", yaml.safe_dump(full, default_flow_style=True, sort_keys=True).strip())
        if self.shape_specialized:
            if problem is None:
                raise EvoError(f"family {self.name} compiles the shape in: render it for a problem")
            for k, v in zip(SHAPE_KEYS, (problem.m, problem.n, problem.k)):
                text = text.replace("{{" + k + "}}", str(v))
        for k, v in full.items():
            text = text.replace("{{" + k + "}}", str(int(v) if isinstance(v, bool) else v))
        if "{{" in text.split("---*/", 1)[-1] and "}}" in text:
            leftover = text[text.index("{{"): text.index("{{") + 40].split("}}")[0]
            raise EvoError(f"family {self.name}: template placeholder {leftover}}}}} has no parameter")
        return KernelSource.parse(text)

    def valid_instances(self) -> Iterator[dict[str, Any]]:
        """Every constraint-valid point of the parameter space, in space order (that of itertools.product).

        Walked depth first with each constraint checked as soon as every parameter it names is set, so a subtree
        that already breaks one is never expanded (a space of ~2M points is enumerated in about a second)."""
        names = list(self.space)
        checks = _checks_by_depth(tuple(names), tuple(self.constraints))
        values = [self.space[n] for n in names]

        def walk(depth: int, params: dict[str, Any], env: dict[str, int]) -> Iterator[dict[str, Any]]:
            name = names[depth]
            for v in values[depth]:
                if not _assign(params, env, name, v, checks[depth]):
                    continue
                if depth + 1 == len(names):
                    yield dict(params)
                else:
                    yield from walk(depth + 1, params, env)
            del params[name]
            env.pop(name, None)

        if not names:
            if self.valid({}):
                yield {}
            return
        yield from walk(0, {}, {})

    def start_instances(self) -> list[dict[str, Any]]:
        """The default and the family's known-good starting points (complete, valid ones only)."""
        out = [self.default_params()] + [self.complete(p) for p in self.starts]
        return [p for p in out if self.valid(p)]

    def library_instances(self, tile: dict[str, int]) -> list[dict[str, Any]]:
        """This family's instances of a library algorithm, from family.yaml's `library_tiles`: each entry maps the
        algorithm's tile, cluster and split (`tile`: TM, TN, CM, CN, SPLIT) to parameters; a value is a literal, an
        expression over those names, or a list of them in order of preference (the first combination that is a valid
        instance is taken). An entry whose values fall outside the space gives nothing."""
        out: list[dict[str, Any]] = []
        for entry in self.library_tiles:
            names = list(entry)
            try:
                choices = [[expr.evaluate(v, tile) if isinstance(v, str) else v
                            for v in (entry[n] if isinstance(entry[n], list) else [entry[n]])] for n in names]
            except EvoError:
                continue
            for combo in itertools.product(*choices):
                params = dict(zip(names, combo))
                if any(v not in self.space.get(n, ()) for n, v in params.items()):
                    continue
                full = self.complete(params)
                if self.valid(full):
                    if full not in out:
                        out.append(full)
                    break
        return out

    def instances_for_ci(self) -> list[dict[str, Any]]:
        return [self.default_params()] + [self.complete(p) for p in self.ci_instances]


def _ints(params: dict[str, Any]) -> dict[str, int]:
    """The parameters an expression can name: the integer and switch values, as ints."""
    return {k: int(v) for k, v in params.items() if isinstance(v, (int, bool))}


def _assign(params: dict[str, Any], env: dict[str, int], name: str, value: Any, checks: tuple[str, ...]) -> bool:
    """Set one parameter of a depth-first walk (its integer value into the constraints' environment) and say whether
    the constraints that become checkable with it hold."""
    params[name] = value
    if isinstance(value, (int, bool)):
        env[name] = int(value)
    else:
        env.pop(name, None)
    return all(expr.evaluate(c, env) for c in checks)


@functools.lru_cache(maxsize=64)
def _checks_by_depth(names: tuple[str, ...], constraints: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The constraints grouped by the position (in `names`) of the last parameter each one names (cached: a search
    draws random instances of the same space many times)."""
    checks: list[list[str]] = [[] for _ in names]
    for c in constraints:
        checks[_last_named(c, list(names))].append(c)
    return tuple(tuple(c) for c in checks)


def _last_named(constraint: str, names: list[str]) -> int:
    """Index of the last parameter (in space order) a constraint names: where valid_instances can check it. One it
    cannot read, or naming anything else, waits for the last parameter (and fails there as Family.valid would)."""
    try:
        tree = ast.parse(str(constraint), mode="eval")
    except SyntaxError:
        return len(names) - 1
    calls = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in calls}
    pos = {n: i for i, n in enumerate(names)}
    if any(u not in pos for u in used):
        return len(names) - 1
    return max((pos[u] for u in used), default=0)


def templates_root() -> Path:
    """The kernel families: ``evo/templates`` inside an installed package (setup.py maps the repository's
    ``templates/`` there), else ``templates/`` beside the package in a checkout."""
    here = Path(__file__).resolve().parent
    packaged = here / "templates"
    return packaged if packaged.is_dir() else here.parent / "templates"


def rerendered(ks: KernelSource, families: list["Family"], problem: Problem | None = None,
               overrides: dict[str, Any] | None = None) -> KernelSource:
    """A kernel rendered anew from its family's current template with its own parameters (a published kernel
    after the template improved), or with `overrides` put over them (a switch tried on a published kernel). A
    parameter the family no longer has, at 0, is a switch removed at its "off" value and is left out; EvoError
    where the family is gone or the parameters no longer render."""
    fam = next((f for f in families if f.name == ks.meta.family), None)
    if fam is None:
        raise EvoError(f"no template family {ks.meta.family}")
    params = {k: v for k, v in ks.meta.params.items() if k in fam.space or v not in (0, False)}
    try:
        return fam.render({**params, **(overrides or {})}, problem)
    except EvoError as e:
        raise EvoError(f"parameters no longer render: {e}" if not overrides else str(e)) from None


def is_family_rendering(ks: KernelSource, families: list["Family"], problem: Problem | None = None) -> bool:
    """Whether ks is, byte for byte, its family's current template rendered with its own parameters (for `problem`
    where the family compiles the shape in): code the family wrote, not a candidate's own."""
    try:
        return rerendered(ks, families, problem).text == ks.text
    except EvoError:  # its family is gone, or its parameters do not render
        return False


def load_families(root: Path | None = None, names: list[str] | None = None, arch: str | None = None) -> list[Family]:
    root = Path(root) if root else templates_root()
    if not root.is_dir():
        raise EvoError(f"templates folder {root} does not exist")
    fams: dict[str, Family] = {}
    for folder in sorted(root.iterdir()):
        if (folder / "family.yaml").is_file():
            fam = Family.load(folder)
            fams[fam.name] = fam
    if names:
        unknown = [n for n in names if n not in fams]
        if unknown:
            raise EvoError(f"unknown family {', '.join(unknown)}; known: {', '.join(sorted(fams))}")
        chosen = [fams[n] for n in names]
    else:
        chosen = list(fams.values())
    if arch:
        chosen = [f for f in chosen if arch in f.archs]
    return chosen
