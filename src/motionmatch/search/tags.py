"""Tag expressions over per-clip tag sets, e.g. ``(walk | run) & !mirrored``.

Grammar (``!`` binds tightest, then ``&``, then ``|``; all left associative)::

    expr   := and ('|' and)*
    and    := unary ('&' unary)*
    unary  := '!' unary | '(' expr ')' | TAG
    TAG    := [A-Za-z0-9_.:-]+            (e.g. walk, walk-back, style:happy, v1.2)

A tag that no clip carries is an error, never an empty match: a typo must not silently select nothing;
likewise an expression no clip satisfies (`walk & !walk`). Expressions are at most 1000 characters and
32 levels of `!` and parentheses deep (the parser recurses; a hostile `! ! ! ...` must not exhaust it).
"""
from __future__ import annotations

import difflib
import re
from typing import Callable, Iterable, Sequence

import numpy as np

__all__ = ["TagExpressionError", "compile_tag_expression", "range_mask", "frame_mask", "known_tags_of"]

MAX_EXPRESSION_CHARS = 1000
MAX_EXPRESSION_NESTING = 32
_TOKEN = re.compile(r"\s*(?:(?P<tag>[A-Za-z0-9_.:\-]+)|(?P<op>[|&!()]))")


class TagExpressionError(ValueError):
    """Syntax error or unknown tag in a tag expression; the message gives the position and the known tags."""

    def __init__(self, message: str, expr: str, pos: int, known_tags: Iterable[str]):
        self.expr, self.pos, self.known_tags = expr, pos, sorted(known_tags)
        known = ", ".join(self.known_tags) if self.known_tags else "(none)"
        super().__init__(f"{message} at position {pos} in tag expression:\n  {expr}\n  {' ' * pos}^\n"
                         f"known tags: {known}")


def _tokenize(expr: str, known: set[str]) -> list[tuple[str, str, int]]:
    tokens, pos = [], 0
    while pos < len(expr):
        if expr[pos:].strip() == "":
            break
        m = _TOKEN.match(expr, pos)
        if m is None:
            bad = pos + len(expr[pos:]) - len(expr[pos:].lstrip())
            raise TagExpressionError(f"unexpected character {expr[bad]!r}", expr, bad, known)
        if m.group("tag") is not None:
            tokens.append(("tag", m.group("tag"), m.start("tag")))
        else:
            tokens.append((m.group("op"), m.group("op"), m.start("op")))
        pos = m.end()
    tokens.append(("end", "", len(expr)))
    return tokens


class _Parser:
    """Recursive descent parser producing closures over a tag set."""

    def __init__(self, expr: str, known: set[str]):
        self.expr, self.known = expr, known
        self.tokens = _tokenize(expr, known)
        self.i, self.depth = 0, 0

    def error(self, message: str, pos: int):
        raise TagExpressionError(message, self.expr, pos, self.known)

    def peek(self):
        return self.tokens[self.i]

    def take(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def parse(self) -> Callable[[set], bool]:
        if self.peek()[0] == "end":
            self.error("empty tag expression", 0)
        fn = self.parse_or()
        kind, text, pos = self.peek()
        if kind != "end":
            self.error(f"expected '|', '&' or end of expression, found {text!r}", pos)
        return fn

    def parse_or(self):
        terms = [self.parse_and()]
        while self.peek()[0] == "|":
            self.take()
            terms.append(self.parse_and())
        if len(terms) == 1:
            return terms[0]
        return lambda tags, terms=tuple(terms): any(t(tags) for t in terms)

    def parse_and(self):
        terms = [self.parse_unary()]
        while self.peek()[0] == "&":
            self.take()
            terms.append(self.parse_unary())
        if len(terms) == 1:
            return terms[0]
        return lambda tags, terms=tuple(terms): all(t(tags) for t in terms)

    def parse_unary(self):
        kind, text, pos = self.take()
        if kind in "!(":
            self.depth += 1
            if self.depth > MAX_EXPRESSION_NESTING:
                self.error(f"'!' and '(' nested deeper than {MAX_EXPRESSION_NESTING} levels", pos)
        if kind == "!":
            inner = self.parse_unary()
            self.depth -= 1
            return lambda tags: not inner(tags)
        if kind == "(":
            inner = self.parse_or()
            self.depth -= 1
            kind2, text2, pos2 = self.take()
            if kind2 != ")":
                self.error(f"expected ')' to close the '(' at position {pos}, found "
                           f"{repr(text2) if kind2 != 'end' else 'end of expression'}", pos2)
            return inner
        if kind == "tag":
            if text not in self.known:
                close = difflib.get_close_matches(text, sorted(self.known), n=3)
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                self.error(f"unknown tag {text!r}{hint}", pos)
            return lambda tags: text in tags
        what = "end of expression" if kind == "end" else repr(text)
        self.error(f"expected a tag, '!' or '(', found {what}", pos)


def compile_tag_expression(expr: str, known_tags: Iterable[str]) -> Callable[[set], bool]:
    """Compile `expr` into a predicate over a set of tags.

    Raises TagExpressionError (a ValueError) on a syntax error or a tag not in `known_tags`.
    """
    known, expr = set(known_tags), str(expr)
    if len(expr) > MAX_EXPRESSION_CHARS:
        raise TagExpressionError(f"{len(expr):,} characters, beyond the bound of {MAX_EXPRESSION_CHARS}",
                                 expr[:60] + "...", 0, known)
    return _Parser(expr, known).parse()


def known_tags_of(range_tags: Sequence[Iterable[str]]) -> set[str]:
    """Union of all clips' tags."""
    known: set[str] = set()
    for tags in range_tags:
        known.update(tags)
    return known


def range_mask(expr: str | None, range_tags: Sequence[Iterable[str]]) -> np.ndarray:
    """Bool (R,): which clips satisfy `expr` (None or blank: all). Raises TagExpressionError when no clip
    does."""
    if expr is None or not str(expr).strip():
        return np.ones(len(range_tags), dtype=bool)
    known = known_tags_of(range_tags)
    predicate = compile_tag_expression(expr, known)
    keep = np.array([bool(predicate(set(tags))) for tags in range_tags], dtype=bool)
    if not keep.any():
        raise TagExpressionError("no clip satisfies the expression", str(expr), 0, known)
    return keep


def frame_mask(expr: str | None, range_tags: Sequence[Iterable[str]], range_starts, range_stops,
               n_frames: int) -> np.ndarray:
    """Bool (n_frames,): frames whose clip (range, stop exclusive) satisfies `expr`.

    None or "" allows every frame, including frames outside all ranges; otherwise frames outside
    every range are False.
    """
    starts = np.asarray(range_starts, dtype=np.int64)
    stops = np.asarray(range_stops, dtype=np.int64)
    if len(starts) != len(range_tags) or len(stops) != len(range_tags):
        raise ValueError(f"{len(range_tags)} tag lists for {len(starts)} range starts and {len(stops)} stops")
    if expr is None or not str(expr).strip():
        return np.ones(int(n_frames), dtype=bool)
    keep = range_mask(expr, range_tags)
    # Difference array: +1 at start, -1 at stop of each kept range, so overlapping ranges also work.
    delta = np.zeros(int(n_frames) + 1, dtype=np.int64)
    np.add.at(delta, np.clip(starts[keep], 0, n_frames), 1)
    np.add.at(delta, np.clip(stops[keep], 0, n_frames), -1)
    return np.cumsum(delta[:-1]) > 0
