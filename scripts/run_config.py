#!/usr/bin/env python3
"""One run's complete config from a study's runs file, to train that run again.

usage: run_config.py RUNS_JSONL GROUP SEED > config.json
       ./train_gpt train --config config.json --train.out_dir=<dir>

RUNS_JSONL is a report's runs.jsonl (src/report/runs_file.h): its first line holds what every
run shares, each further line one run's differences; GROUP is the run's group as the file
names it (its "group", the report's mode name), SEED its train.seed.
"""
import json
import sys

from runs_file import read_runs


def run_config(path, group, seed):
    groups = []
    for run in read_runs(path):
        if run.get("group") not in groups:
            groups.append(run.get("group"))
        if run.get("group") == group and run.get("config", {}).get("train", {}).get("seed") == seed:
            return run["config"]
    sys.exit(f"{path}: no run of group {group!r} with seed {seed} (groups: {', '.join(groups)})")


def main():
    if len(sys.argv) != 4 or not sys.argv[3].lstrip("-").isdigit():
        sys.exit(__doc__.strip())
    print(json.dumps(run_config(sys.argv[1], sys.argv[2], int(sys.argv[3])), indent=2))


if __name__ == "__main__":
    main()
