#!/usr/bin/env python3
"""``make bench-synth``: time synthesis of the default and the three-group config.

Usage: ``python -m scripts.bench_synth [--repeat N]``

Prints the one-off start-up cost (Python imports + the jsii Node.js runtime) and the first (cold)
synthesis, then per config the warm wall time of building the stacks and writing the cloud assembly
(cdk-nag validation included, cfn-lint excluded), best of N, and the three-group / default ratio.
Figures only; nothing is asserted.
Docs: docs/development.md, "Timings".
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from whisper_build.paths import REPO_ROOT

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

CONFIGS = {
    "default": REPO_ROOT / "config" / "default.yaml",
    "three-groups": REPO_ROOT / "config" / "examples" / "three-groups.yaml",
}


def main(argv: list[str] | None = None) -> int:
    """Print start-up, cold and best warm synthesis times of :data:`CONFIGS`; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="syntheses per config (best is reported)")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    from settings import load_config
    from stacks.assembly import synthesize

    startup = time.perf_counter() - started
    print(f"start-up (imports + jsii runtime): {startup:6.2f} s")
    # The first synthesis in a process also loads the jsii modules of every construct library used
    # and hashes the Lambda-layer assets; it is what one `cdk synth` pays on top of start-up.
    with tempfile.TemporaryDirectory(prefix="bench-synth-") as outdir:
        begin = time.perf_counter()
        synthesize(load_config(CONFIGS["default"]), outdir)
        print(f"first synthesis (default, cold):   {time.perf_counter() - begin:6.2f} s")
    best: dict[str, float] = {}
    for name, path in CONFIGS.items():
        config = load_config(path)
        times = []
        for _ in range(max(1, args.repeat)):
            with tempfile.TemporaryDirectory(prefix="bench-synth-") as outdir:
                begin = time.perf_counter()
                synthesize(config, outdir)
                times.append(time.perf_counter() - begin)
        best[name] = min(times)
        listing = ", ".join(f"{t:.2f}" for t in times)
        print(f"synth {name:<13} {len(config.gpu_groups)} GPU groups: best {best[name]:6.2f} s  (runs: {listing})")
    print(f"ratio three-groups / default: {best['three-groups'] / best['default']:.2f}")
    print(f"cpu count: {os.cpu_count()} (figures vary with machine load)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
