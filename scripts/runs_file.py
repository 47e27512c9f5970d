"""A report's runs.jsonl read back whole (the format: src/report/runs_file.h): its first line
holds the report's options and what every run shares, each further line one run's
differences."""
import json


def merged(run, shared):
    """A run line with the shared part put back: objects both hold merge key by key."""
    out = dict(shared)
    for k, v in run.items():
        out[k] = merged(v, out[k]) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def read_runs(path):
    """Every run of the runs file at path, whole; SystemExit naming the file otherwise."""
    with open(path) as f:
        lines = [json.loads(line) for line in f]
    if not lines or not isinstance(lines[0], dict) or "runs_file" not in lines[0]:
        raise SystemExit(f"{path}: not a runs file (its first line has no \"runs_file\" version)")
    shared = lines[0].get("shared", {})
    return [merged(line, shared) for line in lines[1:]]
