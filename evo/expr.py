"""A tiny, safe evaluator for launch expressions such as "cdiv(N, BN) * SPLIT_K".

Only integer arithmetic, comparisons, and/or/not, conditional expressions and a
few functions are allowed; names come from the given environment.
"""
from __future__ import annotations

import ast
import functools
import operator

from .errors import EvoError

_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
}
_CMP = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS = {
    "cdiv": lambda a, b: -(-a // b),
    "min": min,
    "max": max,
    "round_up": lambda a, b: -(-a // b) * b,
}


def evaluate(expr: str | int | float | bool, env: dict[str, int]) -> int:
    """Evaluate an expression to an int (bools become 0/1)."""
    if isinstance(expr, bool):
        return int(expr)
    if isinstance(expr, (int, float)):
        return int(expr)
    return int(_eval(_parse(str(expr)).body, env, str(expr)))


@functools.lru_cache(maxsize=4096)
def _parse(src: str) -> ast.Expression:
    """Parsed once per distinct text: a search evaluates the same few launch rules for thousands of instances."""
    try:
        return ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise EvoError(f"bad expression {src!r}: {e.msg}") from None


def _eval(node: ast.AST, env: dict[str, int], src: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise EvoError(f"unknown name {node.id!r} in expression {src!r}")
        return env[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        return _BIN[type(node.op)](_eval(node.left, env, src), _eval(node.right, env, src))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env, src)
        if isinstance(node.op, ast.USub):
            return -v
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.UAdd):
            return v
    if isinstance(node, ast.BoolOp):
        vals = [_eval(v, env, src) for v in node.values]
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env, src)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, src)
            if type(op) not in _CMP or not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return _eval(node.body, env, src) if _eval(node.test, env, src) else _eval(node.orelse, env, src)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        return _FUNCS[node.func.id](*[_eval(a, env, src) for a in node.args])
    raise EvoError(f"unsupported construct in expression {src!r}")
