"""Filter of the golden tests (lu.tesh): numasim's one-line JSON summary becomes one sorted
`key = value` line per field, without `wall_s` (the only field that varies between runs);
other lines (a trace written to /dev/stdout) pass unchanged."""

import json
import sys


def flat(prefix, value, out):
    if isinstance(value, dict):
        for k in sorted(value):
            flat(f"{prefix}.{k}" if prefix else k, value[k], out)
    elif prefix != "wall_s":
        out.append(f"{prefix} = {json.dumps(value)}")


for line in sys.stdin:
    if line.startswith("{"):
        lines = []
        flat("", json.loads(line), lines)
        print("\n".join(lines))
    else:
        sys.stdout.write(line)
