"""Configuration: dataclasses whose defaults live in defaults.yaml, merged with a user file and flags."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .errors import EvoError

DEFAULTS_PATH = Path(__file__).with_name("defaults.yaml")
FLUSH_MODES = ("read", "write")  # timing.flush_mode: how evo.timing flushes L2 before a timed call


@dataclass
class SearchConfig:
    budget_minutes: float
    max_candidates: int
    population: int
    children: int
    elites: int
    tournament: int
    crossover_rate: float
    coordinated_rate: float
    cross_family_rate: float
    initial_random: int
    switch_best: int
    seed: int
    families: list
    proposers: list
    proposer_weights: dict
    confirm_reps: int
    runoff: int
    sustained_from_us: float
    sustained_seconds: float
    sustained_rounds: int
    sustained_margin: float
    seed_winners: int
    library_seeds: bool
    transposed_seeds: bool
    islands: int
    migrate_every: int
    prior_top: int
    fit_starts: int
    prior_ties: float
    prior_sample: int
    cost_model: bool
    cost_model_regrow: float
    propose_factor: int
    explore: float
    start_slack: float
    bandit_c: float
    patience_seconds: float
    min_seconds: float
    screen_reps: int
    screen_margin: float
    first_round_share: float


@dataclass
class CompileConfig:
    jobs: int
    timeout_s: float
    memory_mb: int
    flags: list
    max_registers: int
    reject_spills: bool
    cache_dir: str
    ahead: bool
    ahead_baselines: bool
    ahead_depth: int
    ahead_nice: int
    defer_s: float


@dataclass
class CheckConfig:
    rtol: float
    atol_elem: float
    seeds: int
    exact: bool
    recheck_seeds: int
    sanitize: bool
    sanitize_timeout_s: float
    ulps: float
    acc_slack: float
    trunc_slack: float
    sample_rows: int
    sample_cols: int
    checksum_sigmas: float
    full_checks_min: int
    full_checks_max: int
    host_spares: int
    defences_off: list


@dataclass
class TimingConfig:
    warmup: int
    reps: int
    flush_l2: bool
    flush_bytes: int
    flush_mode: str
    timeout_s: float
    drift_tol: float


@dataclass
class BaselineConfig:
    cublas: bool
    cublaslt_heuristic: bool
    cublaslt_autotune: bool
    autotune_algorithms: int
    reps: int
    placements: int


@dataclass
class PathConfig:
    db: str
    out: str
    templates: str


@dataclass
class LlmConfig:
    endpoints: list
    temperature: float
    max_tokens: int
    timeout_s: float
    retries: int
    backoff_s: float
    concurrency: int
    edit_modes: list
    inspirations: int
    prompts_dir: str
    budget_tokens: int
    budget_usd: float
    prices: dict
    fix_attempts: int
    log_chars: int
    url: str
    model: str
    key_env: str
    prompt_tokens: int
    profile: bool
    profile_max: int
    profile_timeout_s: float
    ncu: str


@dataclass
class DispatchConfig:
    decisions: str
    noise_floor: float
    measure_reps: int
    general_tries: int
    lt_algorithms: int
    autotune: bool
    measure_libraries: bool
    library_tie: float
    settle_floor: float
    settle_reps: int
    settle_max: int
    settle_budget_s: float
    measure_ties: bool
    stream_instances: int


@dataclass
class Config:
    search: SearchConfig
    compile: CompileConfig
    check: CheckConfig
    timing: TimingConfig
    baselines: BaselineConfig
    paths: PathConfig
    llm: LlmConfig
    dispatch: DispatchConfig
    source: list = field(default_factory=list)  # files merged in, for the record

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("source", None)
        return d


_SECTIONS = {f.name: f.type for f in dataclasses.fields(Config) if f.name != "source"}


def _merge(base: dict, override: dict, where: str) -> dict:
    out = dict(base)
    for key, val in override.items():
        if key not in base:
            raise EvoError(f"unknown config key {where}{key}; known: {', '.join(sorted(base))}")
        if isinstance(base[key], dict) and isinstance(val, dict) and where == "" :
            out[key] = _merge(base[key], val, f"{key}.")
        else:
            out[key] = val
    return out


def _coerce(section: str, cls: type, values: dict) -> Any:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        v = values[f.name]
        t = hints[f.name]
        name = f"{section}.{f.name}"
        if t is bool:
            if not isinstance(v, bool):
                raise EvoError(f"config {name} must be true or false, not {v!r}")
        elif t is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise EvoError(f"config {name} must be an integer, not {v!r}")
            if v < 0:
                raise EvoError(f"config {name} must not be negative")
        elif t is float:
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise EvoError(f"config {name} must be a number, not {v!r}")
            if v < 0:
                raise EvoError(f"config {name} must not be negative")
            v = float(v)
        elif t is str:
            if v is None:
                v = ""
            if not isinstance(v, str):
                raise EvoError(f"config {name} must be a string, not {v!r}")
        elif t is list:
            if isinstance(v, str):
                v = [s for s in v.split(",") if s]
            if not isinstance(v, list):
                raise EvoError(f"config {name} must be a list, not {v!r}")
        elif t is dict:
            if v is None:
                v = {}
            if not isinstance(v, dict):
                raise EvoError(f"config {name} must be a mapping, not {v!r}")
        kwargs[f.name] = v
    return cls(**kwargs)


def _read_yaml(path: Path) -> dict:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise EvoError(f"cannot read config {path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise EvoError(f"config {path} is not valid YAML: {' '.join(str(e).split())[:160]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise EvoError(f"config {path} must be a YAML mapping of sections")
    return data


def load_config(path: str | Path | None = None, overrides: dict[str, dict] | None = None) -> Config:
    """Defaults, then the user's file, then overrides ({section: {key: value}}), validated."""
    merged = _read_yaml(DEFAULTS_PATH)
    sources = [str(DEFAULTS_PATH)]
    if path:
        merged = _merge(merged, _read_yaml(Path(path)), "")
        sources.append(str(path))
    if overrides:
        merged = _merge(merged, {s: {k: v for k, v in kv.items() if v is not None} for s, kv in overrides.items()}, "")
    sections = {name: _coerce(name, cls if isinstance(cls, type) else typing.get_type_hints(Config)[name], merged[name])
                for name, cls in _SECTIONS.items()}
    cfg = Config(**sections, source=sources)
    _validate(cfg)
    return cfg


def _validate(cfg: Config) -> None:
    s = cfg.search
    if s.population < 1 or s.children < 1:
        raise EvoError("config search.population and search.children must be at least 1")
    if s.elites > s.population:
        raise EvoError("config search.elites cannot exceed search.population")
    if s.tournament < 1:
        raise EvoError("config search.tournament must be at least 1")
    for name in ("crossover_rate", "coordinated_rate", "cross_family_rate"):
        if not 0 <= getattr(s, name) <= 1:
            raise EvoError(f"config search.{name} must be between 0 and 1")
    if not 0 <= s.explore <= 1:
        raise EvoError("config search.explore must be between 0 and 1")
    if s.propose_factor < 1:
        raise EvoError("config search.propose_factor must be at least 1")
    if s.sustained_from_us < 0 or not 0 < s.sustained_seconds <= 60 or not 1 <= s.sustained_rounds <= 10 \
            or not 0 <= s.sustained_margin < 1:
        raise EvoError("config search.sustained_from_us must be 0 (off) or more, search.sustained_seconds in (0, 60], "
                       "search.sustained_rounds 1 to 10, search.sustained_margin in [0, 1)")
    if s.switch_best < 0:
        raise EvoError("config search.switch_best must be 0 (off) or more")
    if s.start_slack and s.start_slack < 1:
        raise EvoError("config search.start_slack must be 0 (off) or at least 1")
    known = {"mutate", "optuna", "llm"}
    bad = [p for p in s.proposers if p not in known]
    if bad:
        raise EvoError(f"unknown proposer {', '.join(bad)}; known: {', '.join(sorted(known))}")
    if cfg.timing.reps < 1:
        raise EvoError("config timing.reps must be at least 1")
    from .placements import MAX_PLACEMENTS

    if not 1 <= cfg.baselines.placements <= MAX_PLACEMENTS:
        raise EvoError(f"config baselines.placements must be 1 to {MAX_PLACEMENTS}, not {cfg.baselines.placements}")
    if cfg.timing.flush_mode not in FLUSH_MODES:
        raise EvoError(f"config timing.flush_mode must be one of {', '.join(FLUSH_MODES)}, not {cfg.timing.flush_mode!r}")
    if cfg.compile.ahead_nice > 19:  # (negative numbers are refused with every other one above)
        raise EvoError(f"config compile.ahead_nice must be 0 to 19 (a niceness added to the search's), not "
                       f"{cfg.compile.ahead_nice}")
    if cfg.check.seeds < 1:
        raise EvoError("config check.seeds must be at least 1")
    if not 1 <= cfg.check.full_checks_min <= cfg.check.full_checks_max:
        raise EvoError("config check.full_checks_min must be at least 1 and at most check.full_checks_max")
    if cfg.check.host_spares > 16:  # each one a process and a CUDA context (negative numbers are refused above)
        raise EvoError(f"config check.host_spares must be 0 to 16, not {cfg.check.host_spares}")
    from .defences import defences_off

    defences_off(cfg.check.defences_off, {})  # unknown names end here, with the known ones listed
