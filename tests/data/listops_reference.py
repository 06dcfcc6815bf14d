#!/usr/bin/env python3
"""An independent ListOps evaluator, written from LRA's recipe
(lra_benchmarks/data/listops.py: to_value with numpy's median), for
tests/data/test_listops.cpp.

    listops_reference.py FILE MAX_DEPTH MAX_ARGS MIN_LENGTH MAX_LENGTH

FILE holds one example a line: the label, a tab, the tokens as text
("[MAX 4 3 [MIN 2 3 ] ]"). Each line is parsed by recursive descent (the
grammar: a digit, or an operator, 2..MAX_ARGS nodes and "]"; depth at most
MAX_DEPTH, the root at depth 1), its length checked (MIN_LENGTH < tokens <
MAX_LENGTH) and its value compared with the label. Prints one line per problem
and a summary; exit status 1 when there is any problem.
"""
import sys

import numpy as np

OPERATORS = {"[MIN": min, "[MAX": max, "[MED": lambda v: int(np.median(v)),
             "[SM": lambda v: int(np.sum(v) % 10)}


def parse(words, at, depth, max_depth, max_args):
    """(value, next position) of the node at words[at]."""
    if at >= len(words):
        raise ValueError("the sequence ends inside a node")
    if depth > max_depth:
        raise ValueError(f"depth {depth} exceeds {max_depth} at word {at}")
    word = words[at]
    if word.isdigit() and len(word) == 1:
        return int(word), at + 1
    if word not in OPERATORS:
        raise ValueError(f"word {at} ({word!r}) is neither a digit nor an operator")
    values, at = [], at + 1
    while at < len(words) and words[at] != "]":
        value, at = parse(words, at, depth + 1, max_depth, max_args)
        values.append(value)
    if at >= len(words):
        raise ValueError(f"operator {word} is not closed")
    if not 2 <= len(values) <= max_args:
        raise ValueError(f"operator {word} has {len(values)} arguments (2..{max_args})")
    return OPERATORS[word](values), at + 1


def main():
    path, max_depth, max_args, min_length, max_length = sys.argv[1:6]
    max_depth, max_args = int(max_depth), int(max_args)
    min_length, max_length = int(min_length), int(max_length)
    problems = checked = 0
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        label, text = line.rstrip("\n").split("\t")
        words = text.split()
        try:
            value, end = parse(words, 0, 1, max_depth, max_args)
            if end != len(words):
                raise ValueError(f"{len(words) - end} words follow the tree")
            if not min_length < len(words) < max_length:
                raise ValueError(f"length {len(words)} is outside ({min_length}, {max_length})")
            if value != int(label):
                raise ValueError(f"value {value}, label {label}")
        except ValueError as e:
            problems += 1
            print(f"line {number}: {e}")
        checked += 1
    print(f"listops reference: {checked} examples, {problems} problems")
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
