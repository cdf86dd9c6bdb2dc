#!/usr/bin/env python3
"""An offline PromQL checker for deploy/validate.py (promtool cannot be installed offline).

    python3 deploy/promql.py 'sum(rate(skua_publishes_total[5m])) by (result)'

`parse(expr)` parses an expression with PromQL's grammar (selectors and label matchers, range
and subquery brackets, offset and @ modifiers, function calls with their argument count and
kinds, aggregations with by/without before or after, binary operators with bool, on/ignoring
and group_left/group_right, number and string literals, durations) and returns the metric
names it selects. It raises `PromQLError` for anything the Prometheus parser would refuse that
such a grammar can see: unbalanced brackets, unknown functions, a range vector where an instant
vector is needed (or the reverse, `rate(x)`), a malformed matcher or duration, two operands
without an operator. It does not evaluate and does not know metric types (validate.py checks
that every metric name exists in Skua's sources).

Grafana's `$__rate_interval`, `$__interval` and `$__range` are accepted as durations, and
`$var` / `${var}` inside label values (strings) are left alone.
"""

import re
import sys


class PromQLError(Exception):
    """An expression the Prometheus parser would refuse."""


# Functions: name -> (argument kinds, minimum count). "v" instant vector, "r" range vector,
# "s" scalar (number or scalar expression), "str" string; a trailing "*" repeats the last kind.
FUNCTIONS = {
    **{f: (["v"], 1) for f in (
        "abs", "ceil", "exp", "floor", "ln", "log2", "log10", "sqrt", "sgn", "sort", "sort_desc", "timestamp",
        "scalar", "acos", "acosh", "asin", "asinh", "atan", "atanh", "cos", "cosh", "sin", "sinh", "tan", "tanh",
        "deg", "rad", "absent", "histogram_count", "histogram_sum", "histogram_avg", "histogram_stddev",
        "histogram_stdvar")},
    **{f: (["v"], 0) for f in ("day_of_month", "day_of_week", "day_of_year", "days_in_month", "hour", "minute",
                               "month", "year")},
    **{f: (["r"], 1) for f in (
        "rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets", "absent_over_time",
        "present_over_time", "avg_over_time", "min_over_time", "max_over_time", "sum_over_time",
        "count_over_time", "stddev_over_time", "stdvar_over_time", "last_over_time", "mad_over_time")},
    "quantile_over_time": (["s", "r"], 2),
    "predict_linear": (["r", "s"], 2),
    "holt_winters": (["r", "s", "s"], 3),
    "double_exponential_smoothing": (["r", "s", "s"], 3),
    "histogram_quantile": (["s", "v"], 2),
    "histogram_fraction": (["s", "s", "v"], 3),
    "clamp": (["v", "s", "s"], 3),
    "clamp_max": (["v", "s"], 2),
    "clamp_min": (["v", "s"], 2),
    "round": (["v", "s"], 1),
    "vector": (["s"], 1),
    "time": ([], 0),
    "pi": ([], 0),
    "label_replace": (["v", "str", "str", "str", "str"], 5),
    "label_join": (["v", "str", "str", "str*"], 3),
    "sort_by_label": (["v", "str*"], 1),
    "sort_by_label_desc": (["v", "str*"], 1),
}
AGGREGATIONS = {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk",
                "quantile", "limitk", "limit_ratio"}
# Aggregations that take a parameter before the vector.
PARAM_AGGREGATIONS = {"count_values", "bottomk", "topk", "quantile", "limitk", "limit_ratio"}
BINARY = {"+", "-", "*", "/", "%", "^", "==", "!=", ">", "<", ">=", "<=", "and", "or", "unless", "atan2"}
COMPARISONS = {"==", "!=", ">", "<", ">=", "<="}
SET_OPS = {"and", "or", "unless"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"} | SET_OPS | {"atan2"}

DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d|w|y))+")
GRAFANA_DURATIONS = ("$__rate_interval", "$__interval", "$__range")
TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<grafana>\$__rate_interval|\$__interval|\$__range)
  | (?P<duration>(?:\d+(?:ms|s|m|h|d|w|y))+(?![A-Za-z0-9_]))
  | (?P<number>0x[0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[Ii]nf|NaN)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_:]*)
  | (?P<op>==|!=|>=|<=|=~|!~|[-+*/%^<>=(){}\[\],:@])
    """,
    re.VERBOSE,
)


def tokenize(expr):
    tokens, pos = [], 0
    while pos < len(expr):
        m = TOKEN.match(expr, pos)
        if not m:
            raise PromQLError(f"unexpected character {expr[pos]!r} at {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        if kind == "grafana":
            kind = "duration"
        tokens.append((kind, m.group()))
    tokens.append(("eof", ""))
    return tokens


class Parser:
    """Recursive descent over the tokens; every parse_* returns the expression's kind: "v"
    (instant vector), "r" (range vector), "s" (scalar) or "str"."""

    def __init__(self, expr):
        self.tokens = tokenize(expr)
        self.i = 0
        self.metrics = []

    def peek(self, k=0):
        return self.tokens[min(self.i + k, len(self.tokens) - 1)]

    def next(self):
        t = self.tokens[self.i]
        self.i += 1
        return t

    def expect(self, value):
        t = self.next()
        if t[1] != value:
            raise PromQLError(f"expected {value!r}, found {t[1] or 'the end'!r}")
        return t

    def at_binary(self):
        kind, value = self.peek()
        return (kind == "op" and value in BINARY) or (kind == "ident" and value in BINARY)

    def parse(self):
        kind = self.parse_expr()
        if self.peek()[0] != "eof":
            raise PromQLError(f"unexpected {self.peek()[1]!r} after a complete expression")
        return kind

    def parse_expr(self):
        left = self.parse_unary()
        while self.at_binary():
            op = self.next()[1]
            if self.peek()[1] == "bool":
                if op not in COMPARISONS:
                    raise PromQLError(f"bool only modifies comparisons, not {op!r}")
                self.next()
            if self.peek()[1] in ("on", "ignoring"):
                self.next()
                self.parse_labels()
                if self.peek()[1] in ("group_left", "group_right"):
                    self.next()
                    if self.peek()[1] == "(":
                        self.parse_labels()
            right = self.parse_unary()
            for side in (left, right):
                if side in ("r", "str"):
                    raise PromQLError(f"binary {op!r} needs instant vectors or scalars, not {self.describe(side)}")
            if op in SET_OPS and "s" in (left, right):
                raise PromQLError(f"{op!r} needs vectors on both sides")
            left = "s" if left == right == "s" else "v"
        return left

    @staticmethod
    def describe(kind):
        return {"v": "an instant vector", "r": "a range vector", "s": "a scalar", "str": "a string"}[kind]

    def parse_unary(self):
        if self.peek()[1] in ("-", "+"):
            self.next()
            kind = self.parse_unary()
            if kind not in ("v", "s"):
                raise PromQLError("unary minus needs a vector or a scalar")
            return kind
        return self.parse_postfix()

    def parse_postfix(self):
        kind, selector = self.parse_primary()
        while True:
            t = self.peek()
            if t[1] == "[":
                self.next()
                self.duration()
                if self.peek()[1] == ":":
                    self.next()
                    if self.peek()[1] != "]":
                        self.duration()
                    if kind != "v":
                        raise PromQLError("a subquery needs an instant vector")
                elif not selector:
                    raise PromQLError("a range [d] applies to a selector only (use a subquery [d:step])")
                self.expect("]")
                kind, selector = "r", False
            elif t[1] == "offset":
                self.next()
                if self.peek()[1] == "-":
                    self.next()
                self.duration()
            elif t[1] == "@":
                self.next()
                v = self.next()
                if v[0] != "number" and v[1] not in ("start", "end"):
                    raise PromQLError("@ needs a timestamp, start() or end()")
                if v[1] in ("start", "end"):
                    self.expect("(")
                    self.expect(")")
            else:
                return kind

    def duration(self):
        t = self.next()
        if t[0] != "duration":
            raise PromQLError(f"expected a duration like 5m, found {t[1] or 'the end'!r}")

    def parse_labels(self):
        self.expect("(")
        while self.peek()[1] != ")":
            t = self.next()
            if t[0] != "ident" and t[0] != "string":
                raise PromQLError(f"expected a label name, found {t[1]!r}")
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ")":
                raise PromQLError(f"expected ',' or ')' in a label list, found {self.peek()[1]!r}")
        self.expect(")")

    def parse_matchers(self):
        self.expect("{")
        while self.peek()[1] != "}":
            t = self.next()
            if t[0] == "string" and self.peek()[1] in (",", "}"):
                # Prometheus 3: a quoted metric name inside the braces.
                self.metrics.append(t[1][1:-1])
            else:
                if t[0] != "ident" and t[0] != "string":
                    raise PromQLError(f"expected a label name in a matcher, found {t[1]!r}")
                op = self.next()
                if op[1] not in ("=", "!=", "=~", "!~"):
                    raise PromQLError(f"expected =, !=, =~ or !~ after label {t[1]!r}, found {op[1]!r}")
                v = self.next()
                if v[0] != "string":
                    raise PromQLError(f"label {t[1]!r} needs a quoted value, found {v[1]!r}")
                if op[1] in ("=~", "!~"):
                    try:
                        re.compile(grafana_free(v[1][1:-1]))
                    except re.error as e:
                        raise PromQLError(f"label {t[1]!r}: bad regular expression: {e}") from None
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != "}":
                raise PromQLError(f"expected ',' or '}}' in matchers, found {self.peek()[1]!r}")
        self.expect("}")

    def parse_primary(self):
        """(kind, is_plain_selector)."""
        kind, value = self.peek()
        if kind == "number":
            self.next()
            return "s", False
        if kind == "string":
            self.next()
            return "str", False
        if kind == "duration":
            raise PromQLError(f"a duration {value!r} outside brackets")
        if value == "(":
            self.next()
            inner = self.parse_expr()
            self.expect(")")
            return inner, False
        if value == "{":
            self.parse_matchers()
            return "v", True
        if kind != "ident":
            raise PromQLError(f"unexpected {value or 'end of expression'!r}")
        if value in AGGREGATIONS and self.peek(1)[1] in ("(", "by", "without"):
            return self.parse_aggregation(), False
        if self.peek(1)[1] == "(":
            return self.parse_call(), False
        if value in KEYWORDS:
            raise PromQLError(f"keyword {value!r} where an expression is expected")
        self.next()
        self.metrics.append(value)
        if self.peek()[1] == "{":
            self.parse_matchers()
        return "v", True

    def parse_aggregation(self):
        name = self.next()[1]
        if self.peek()[1] in ("by", "without"):
            self.next()
            self.parse_labels()
        self.expect("(")
        if name in PARAM_AGGREGATIONS:
            param = self.parse_expr()
            if param not in ("s", "str"):
                raise PromQLError(f"{name}'s parameter must be a scalar or string")
            self.expect(",")
        arg = self.parse_expr()
        if arg != "v":
            raise PromQLError(f"{name} aggregates an instant vector, not {self.describe(arg)}")
        self.expect(")")
        if self.peek()[1] in ("by", "without"):
            self.next()
            self.parse_labels()
        return "v"

    def parse_call(self):
        name = self.next()[1]
        if name not in FUNCTIONS:
            raise PromQLError(f"unknown function {name!r}")
        kinds, minimum = FUNCTIONS[name]
        self.expect("(")
        args = []
        while self.peek()[1] != ")":
            args.append(self.parse_expr())
            if self.peek()[1] == ",":
                self.next()
            elif self.peek()[1] != ")":
                raise PromQLError(f"expected ',' or ')' in {name}(), found {self.peek()[1]!r}")
        self.expect(")")
        repeat = kinds and kinds[-1].endswith("*")
        if len(args) < minimum or (not repeat and len(args) > len(kinds)):
            raise PromQLError(f"{name}() takes {minimum}..{len(kinds)} arguments, got {len(args)}")
        for i, got in enumerate(args):
            want = kinds[min(i, len(kinds) - 1)].rstrip("*")
            if want == "s" and got in ("s", "v") and name not in ("vector",):
                # A scalar parameter may be any scalar expression; Prometheus refuses vectors.
                if got == "v":
                    raise PromQLError(f"{name}() argument {i + 1} must be a scalar, not an instant vector")
                continue
            if want == "s" and name == "vector" and got == "s":
                continue
            if got != want:
                raise PromQLError(
                    f"{name}() argument {i + 1} must be {self.describe(want)}, not {self.describe(got)}")
        return "s" if name in ("scalar", "time", "pi") else "v"


def grafana_free(text):
    """`text` with Grafana's $variables replaced by a harmless word (for regex checks)."""
    return re.sub(r"\$\{?[A-Za-z_][A-Za-z0-9_:]*\}?", "x", text)


def parse(expr):
    """The metric names `expr` selects, in order; raises PromQLError when it does not parse."""
    p = Parser(expr)
    p.parse()
    return p.metrics


def main(argv):
    status = 0
    for expr in argv[1:]:
        try:
            print(f"ok   {expr}: {', '.join(parse(expr)) or 'no metric'}")
        except PromQLError as e:
            print(f"FAIL {expr}: {e}")
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv))
