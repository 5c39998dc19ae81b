"""A tiny, safe evaluator for launch expressions such as "cdiv(N, BN) * SPLIT_K".

Only integer arithmetic, comparisons, and/or/not, conditional expressions and a
few functions are allowed; names come from the given environment.
"""
from __future__ import annotations

import ast
import functools
import operator
from typing import Any, Callable

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
    return int(_compiled(str(expr))(env))


@functools.lru_cache(maxsize=4096)
def _compiled(src: str) -> Callable[[dict[str, int]], Any]:
    """The expression as a tree of closures, built once per distinct text: a search and the cost model evaluate the
    same few launch rules for hundreds of thousands of instances. The closures evaluate exactly as the tree reads
    (every operand of and/or, comparisons left to right until one fails, the taken branch of a conditional); an
    unknown name or an unsupported construct is an error when it is evaluated, as before."""
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise EvoError(f"bad expression {src!r}: {e.msg}") from None
    return _closure(tree.body, src)


def _closure(node: ast.AST, src: str) -> Callable[[dict[str, int]], Any]:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, bool)):
        value = node.value
        return lambda env: value
    if isinstance(node, ast.Name):
        name = node.id

        def lookup(env):
            try:
                return env[name]
            except KeyError:
                raise EvoError(f"unknown name {name!r} in expression {src!r}") from None
        return lookup
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        op, left, right = _BIN[type(node.op)], _closure(node.left, src), _closure(node.right, src)
        return lambda env: op(left(env), right(env))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.Not, ast.UAdd)):
        operand = _closure(node.operand, src)
        if isinstance(node.op, ast.USub):
            return lambda env: -operand(env)
        if isinstance(node.op, ast.Not):
            return lambda env: not operand(env)
        return operand
    if isinstance(node, ast.BoolOp):
        parts = [_closure(v, src) for v in node.values]
        if isinstance(node.op, ast.And):
            return lambda env: all([f(env) for f in parts])
        return lambda env: any([f(env) for f in parts])
    if isinstance(node, ast.Compare) and all(type(op) in _CMP for op in node.ops):
        first = _closure(node.left, src)
        chain = [(_CMP[type(op)], _closure(r, src)) for op, r in zip(node.ops, node.comparators)]

        def compare(env):
            left = first(env)
            for op, right_of in chain:
                right = right_of(env)
                if not op(left, right):
                    return False
                left = right
            return True
        return compare
    if isinstance(node, ast.IfExp):
        test, body, orelse = _closure(node.test, src), _closure(node.body, src), _closure(node.orelse, src)
        return lambda env: body(env) if test(env) else orelse(env)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCS and not node.keywords:
        fn, args = _FUNCS[node.func.id], [_closure(a, src) for a in node.args]
        return lambda env: fn(*[a(env) for a in args])

    def unsupported(env):
        raise EvoError(f"unsupported construct in expression {src!r}")
    return unsupported
