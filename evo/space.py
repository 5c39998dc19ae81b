"""A family's instance space: enumerate, sample and size instances without rendering their sources.

Rendering a candidate (template substitution, front-matter parse, hash) costs about a millisecond; the prior
and the cost model look at thousands of instances per shape. ``FamilySpace`` parses the family's launch rules
(grid, block, dynamic shared memory, workspace, requires) once per problem and evaluates them for any parameter
set, giving the same geometry ``KernelSource.launch`` gives the rendered candidate.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import yaml

from . import expr
from .errors import EvoError
from .families import SHAPE_KEYS, Family
from .kernel import KernelMeta, parse_meta
from .problem import Problem


ENUMERATE_LIMIT = 200_000  # larger spaces are sampled, never enumerated (cutlass_sm90: 4.4 M points, over 1 min)


@dataclass(frozen=True)
class Geometry:
    """Launch geometry of one instance on one problem."""

    ctas: int
    threads: int
    smem: int  # dynamic shared memory per CTA, bytes
    workspace: int


class Enumerations:
    """Every constraint-valid instance of a family, enumerated once per owner: a search makes its own; a sweep
    keeps one per process and hands it to each shape's search (a large space takes seconds to enumerate).
    `fits` holds the starts refitted to each shape (evo.prior.Prior.fit), first answer kept: a sweep's search runs the
    very fits an earlier search compiled ahead for its shape. Refitted again with a newer cost model, a start moved to
    another instance that nobody had compiled: 35-47 s of nvcc with the GPU idle (docs/perf-search.md)."""

    def __init__(self) -> None:
        self._by_key: dict[tuple, list[dict[str, Any]]] = {}
        self.fits: dict[tuple, Any] = {}

    def of(self, family: Family) -> list[dict[str, Any]]:
        """Family.valid_instances(), remembered per (name, space, constraints)."""
        key = (family.name, tuple((k, tuple(v)) for k, v in family.space.items()), tuple(family.constraints))
        if key not in self._by_key:
            self._by_key[key] = list(family.valid_instances())
        return self._by_key[key]


class FamilySpace:
    """One family's valid instances (enumerated once) and their launch geometry per problem."""

    def __init__(self, family: Family, enumerations: Enumerations | None = None):
        self.family = family
        self.enumerations = enumerations if enumerations is not None else Enumerations()
        self._all: list[dict[str, Any]] | None = None
        self._meta: dict[str, KernelMeta | None] = {}  # by shape ("": front matter that names no shape)
        self._front: tuple[str, bool] | None = None  # the front matter, and whether it names the shape

    @property
    def name(self) -> str:
        return self.family.name

    def instances(self) -> list[dict[str, Any]]:
        """Every constraint-valid instance (the family's space order); computed on first use."""
        if self._all is None:
            self._all = self.enumerations.of(self.family)
        return self._all

    @property
    def size(self) -> int:
        """Points of the parameter space before constraints."""
        return math.prod(len(v) for v in self.family.space.values())

    def sample(self, rng: random.Random, limit: int) -> list[dict[str, Any]]:
        """The starts, then up to ``limit`` instances drawn without replacement (all of them when the space is smaller).
        Spaces over ENUMERATE_LIMIT points are not enumerated: valid instances are drawn at random (rejection)."""
        out = [dict(p) for p in self.family.start_instances()]
        keys = {_key(p) for p in out}
        if self.size > ENUMERATE_LIMIT:
            picks = []
            for _ in range(limit * 20):
                if len(picks) >= limit:
                    break
                p = self.family.random_params(rng, tries=50)
                if p is not None:
                    picks.append(p)
        else:
            pool = self.instances()
            picks = pool if len(pool) <= limit else rng.sample(pool, limit)
        for p in picks:
            if _key(p) not in keys:
                keys.add(_key(p))
                out.append(dict(p))
        return out

    def _meta_for(self, problem: Problem) -> KernelMeta | None:
        """The launch rules with the problem's shape filled in; None when the front matter itself has parameter
        placeholders (then the geometry needs a rendered candidate). Front matter without the shape's placeholders
        is parsed once for every shape (the cost model sizes thousands of measured instances over hundreds of shapes)."""
        if self._front is None:
            text = self.family.template
            end = text.find("---*/")
            front = (text[: end + len("---*/")] if end >= 0 else text).replace("{{PARAMS}}", "{}")
            self._front = (front, any("{{" + k + "}}" in front for k in SHAPE_KEYS))
        front, shaped = self._front
        key = problem.key if shaped else ""
        if key not in self._meta:
            for k, v in zip(SHAPE_KEYS, (problem.m, problem.n, problem.k)):
                front = front.replace("{{" + k + "}}", str(v))
            meta = None
            if "{{" not in front:
                try:
                    meta = parse_meta(front + "\n")
                except (EvoError, yaml.YAMLError):
                    meta = None
            self._meta[key] = meta
        return self._meta[key]

    def geometry(self, params: dict[str, Any], problem: Problem, num_sms: int) -> Geometry | None:
        """The instance's launch geometry on the problem; None when it does not accept the problem or its
        launch is empty."""
        meta = self._meta_for(problem)
        if meta is None:
            try:
                ks = self.family.render(params, problem)
                if not ks.accepts(problem, num_sms):
                    return None
                spec = ks.launch(problem, num_sms)
            except (EvoError, ZeroDivisionError):
                return None
            return Geometry(spec.grid[0] * spec.grid[1] * spec.grid[2], spec.block[0] * spec.block[1] * spec.block[2],
                            spec.smem, spec.workspace)
        env = {**self.family.env(params, problem), "NUM_SMS": num_sms}
        try:
            if not expr.evaluate(meta.requires, env):
                return None
            grid = [expr.evaluate(g, env) for g in meta.grid]
            block = [expr.evaluate(b, env) for b in meta.block]
            smem = expr.evaluate(meta.smem, env)
            ws = expr.evaluate(meta.workspace, env)
        except (EvoError, ZeroDivisionError):
            return None
        if min(grid) < 1 or min(block) < 1:
            return None
        return Geometry(grid[0] * grid[1] * grid[2], block[0] * block[1] * block[2], smem, ws)


def _key(params: dict[str, Any]) -> tuple:
    return tuple(sorted(params.items()))


def params_key(params: dict[str, Any]) -> tuple:
    """A hashable identity of a parameter set."""
    return _key(params)
