"""The ``when`` expressions of rule advice, and reading field values as numbers.

A condition is parsed once with ``ast`` and checked against a whitelist of node types, so a
rule file can compare numbers but never call, index or import anything. Field values such as
``2.00 GiB`` become bytes, ``600000`` a plain number; a field that is missing or not a number
makes the whole condition false (the advice is left out rather than guessed).
"""

from __future__ import annotations

import ast
import operator

import regex

_SIZE = regex.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)(B?)\s*$", regex.IGNORECASE)
_POWERS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}

_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
_COMPARE = {
    ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.Eq: operator.eq, ast.NotEq: operator.ne,
}
_ALLOWED = (
    ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.USub, ast.UAdd,
    ast.BinOp, ast.Compare, ast.Name, ast.Load, ast.Constant, *_BINARY, *_COMPARE,
)


# Deeper than any comparison a person writes; ``Condition._eval`` recurses once per level.
MAX_DEPTH = 50
# How much of an expression an error quotes: a line, whatever its length.
_QUOTED = 80


class ConditionError(ValueError):
    """A ``when`` expression that is not valid or uses something other than arithmetic."""


class _Missing(Exception):
    pass


def parse_number(value: str) -> float | None:
    """``'2.00 GiB'`` -> 2147483648.0, ``'600000'`` -> 600000.0, ``'36 MB'`` -> 36e6; else None."""
    match = _SIZE.match(value)
    if not match:
        return None
    number, prefix, binary, unit = match.groups()
    base = 1024 if binary or (prefix and not unit) else 1000
    return float(number) * base ** _POWERS[prefix.upper()]


class Condition:
    """A compiled ``when`` expression; ``names`` are the fields it reads."""

    def __init__(self, text: str) -> None:
        self.text = text
        tree = _parse(text)
        for node in ast.walk(tree):
            if not isinstance(node, _ALLOWED):
                raise ConditionError(
                    f"when expression {_quoted(text)} may only use numbers, field names, "
                    f"+ - * / comparisons and and/or/not (found {type(node).__name__})"
                )
            if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)):
                raise ConditionError(f"when expression {_quoted(text)}: only numeric constants")
        self._tree = tree
        self.names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}

    def holds(self, fields: dict[str, str]) -> bool:
        try:
            return bool(self._eval(self._tree.body, fields))
        except (_Missing, ZeroDivisionError):
            return False

    def _eval(self, node: ast.AST, fields: dict[str, str]):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            number = parse_number(fields.get(node.id, "")) if node.id in fields else None
            if number is None:
                raise _Missing(node.id)
            return number
        if isinstance(node, ast.BoolOp):
            values = (self._eval(v, fields) for v in node.values)
            return all(values) if isinstance(node.op, ast.And) else any(values)
        if isinstance(node, ast.UnaryOp):
            value = self._eval(node.operand, fields)
            if isinstance(node.op, ast.Not):
                return not value
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp):
            return _BINARY[type(node.op)](self._eval(node.left, fields), self._eval(node.right, fields))
        if isinstance(node, ast.Compare):
            left = self._eval(node.left, fields)
            for op, right_node in zip(node.ops, node.comparators):
                right = self._eval(right_node, fields)
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        raise _Missing(type(node).__name__)  # unreachable: the whitelist was checked


def _parse(text: str) -> ast.Expression:
    """The tree of a ``when`` expression at most ``MAX_DEPTH`` deep."""
    too_deep = ConditionError(f"when expression {_quoted(text)} is too deeply nested (more than {MAX_DEPTH} levels)")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConditionError(f"invalid when expression {_quoted(text)}: {exc.msg}") from None
    except (RecursionError, MemoryError):  # how CPython's parser says an expression is too deep
        raise too_deep from None
    if _depth(tree) > MAX_DEPTH:
        raise too_deep
    return tree


def _depth(tree: ast.AST) -> int:
    deepest, todo = 0, [(tree, 1)]
    while todo:  # not recursive: the tree may be as deep as the parser allows
        node, depth = todo.pop()
        deepest = max(deepest, depth)
        todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _quoted(text: str) -> str:
    return repr(text) if len(text) <= _QUOTED else repr(text[:_QUOTED]) + "..."
