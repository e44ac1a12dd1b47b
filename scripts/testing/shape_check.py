#!/usr/bin/env python3
"""The code's shape, checked on every test run: no Swift file over 500 lines, no function over 80
lines (the C callback table, `makeOperations`, excepted: one entry per FUSE operation)."""
import os
import re
import sys

MAX_FILE, MAX_FUNC = 500, 80
EXCEPTED = {"makeOperations"}
DECL = re.compile(r'^\s*(?:@\w+(?:\([^)]*\))?\s+)*(?:(?:public|private|fileprivate|internal|static|final|override|mutating|nonisolated|convenience|required)\s+)*(func\s+(\w+)|init\??\s*[(<]|var\s+(\w+)\s*:[^=]*\{\s*$)')
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def body_length(lines, start):
    """Lines from a declaration to the brace that closes its body (0: no body within 6 lines)."""
    depth, opened = 0, False
    in_multiline = False
    for j in range(start, len(lines)):
        line = lines[j]
        if line.count('"""') % 2 == 1:
            in_multiline = not in_multiline
            continue
        if in_multiline:
            continue
        code = STRING.sub('""', line.split('//')[0] if '"' not in line else line)
        for ch in code:
            if ch == '{':
                depth += 1
                opened = True
            elif ch == '}':
                depth -= 1
        if opened and depth <= 0:
            return j - start + 1
        if not opened and j > start + 6:
            return 0
    return 0


def main(roots):
    problems = []
    for root in roots:
        for d, _, files in os.walk(root):
            for f in sorted(files):
                if not f.endswith('.swift'):
                    continue
                path = os.path.join(d, f)
                lines = open(path, encoding='utf-8').read().split('\n')
                if len(lines) - 1 > MAX_FILE:
                    problems.append(f"{path}: {len(lines) - 1} lines (at most {MAX_FILE})")
                for i, line in enumerate(lines):
                    m = DECL.match(line)
                    if not m or line.strip().startswith('//'):
                        continue
                    name = m.group(2) or m.group(3) or 'init'
                    n = body_length(lines, i)
                    if n > MAX_FUNC and name not in EXCEPTED:
                        problems.append(f"{path}:{i + 1}: {name} is {n} lines (at most {MAX_FUNC})")
    for p in problems:
        print("shape:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:] or ['Sources', 'Tests']))
