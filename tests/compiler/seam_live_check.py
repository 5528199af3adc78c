#!/usr/bin/env python3
"""Reads a module after smelt-plan-memory (stdin) and prints one line per sublayer seam (a main-stream hc_expand whose
streams the next main-stream op, an hc_collapse, reads; with the add of its sum when that is the main-stream op before
it): "seam LAYER: apart" when the collapse's output and the expanded streams share no byte with any operand of the
group, else "seam LAYER: overlaps" (seam-live: tests/compiler/plan-memory-seams.test)."""
import re
import sys

MAX_ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 64
op_re = re.compile(r"^\s*(?:((?:%[\w#]+(?:, )?)+) = )?(smelt\.\w+) ([^{]*)\{(.*)\} : \(([^)]*)\) -> (.*)$")
size, off, ops = {}, {}, []
in_forward = False
for line in sys.stdin:
    if "func.func" in line:
        in_forward = "@forward(" in line
    if not in_forward:
        continue
    m = op_re.match(line)
    if not m or m.group(2) in ("smelt.weight", "smelt.state"):
        continue
    results, name, args, attrs, _, rtype = m.groups()
    results = re.findall(r"%[\w#]+", results or "")
    res = results[0] if results else None
    operands = re.findall(r"%[\w#]+", args)
    side = "stream = 1" in attrs
    layer = re.search(r"layer = (-?\d+)", attrs)
    o = re.search(r"offsets = array<i64: ([\d, ]+)>", attrs)
    if results and o:
        widths = re.findall(r"tensor<\?x(\d+)x(?:f32|i32)>", rtype)
        for r, w, at in zip(results, widths, o.group(1).split(",")):
            size[r] = MAX_ROWS * int(w) * 4
            off[r] = int(at)
    ops.append((name, res, operands, side, layer.group(1) if layer else "?"))
main = [op for op in ops if not op[3]]
for i, (name, res, operands, _, layer) in enumerate(main):
    if name != "smelt.hc_collapse" or i == 0 or main[i - 1][0] != "smelt.hc_expand" or operands[0] != main[i - 1][1]:
        continue
    group = [main[i - 1]]
    if i >= 2 and main[i - 2][0] == "smelt.add" and main[i - 1][2][1] == main[i - 2][1]:
        group.append(main[i - 2])
    reads = {v for g in group for v in g[2] if v in off}
    writes = [res, main[i - 1][1]]

    def overlap(a, b):
        return off[a] < off[b] + size[b] and off[b] < off[a] + size[a]

    bad = [(w, r) for w in writes for r in reads if w != r and overlap(w, r)]
    print(f"seam {layer}: {'overlaps ' + str(bad) if bad else 'apart'}")
