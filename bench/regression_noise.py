"""The two-campaign experiment of `exabench history regress` under real machine noise, N times
(issue 30): per trial, a baseline campaign of tiny K-Means (its repeats sized from its own first
runs' spread), the same config beside a CPU-burning neighbour process (must be no change), and the
same config slowed by 30% (`slowdown: 0.3`; must be `regressed`, slower, its interval covering 30%); the
three campaigns' runs interleaved (tests/helpers_noise.py says why).

    PYTHONPATH=. python bench/regression_noise.py [--trials 3] [--keep DIR]

Prints each trial's verdicts, changes, intervals, floors and runs, and the totals: false verdicts
(the neighbour called a change) and slowdowns found. tests/integration/test_regression_noise.py asserts one trial.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers_noise import SLOWDOWN, experiment  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--keep", default=None, help="keep each trial's campaigns and store under this folder")
    args = ap.parse_args()
    false_verdicts = found = 0
    for trial in range(1, args.trials + 1):
        t0 = time.perf_counter()
        parent = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="regression-noise-"))
        out = experiment(parent / f"trial{trial}")
        noisy, slowed = out["noisy"], out["slowed"]
        false_verdicts += noisy["verdict"] != "unchanged"
        covered = slowed["ci_low"] <= SLOWDOWN <= slowed["ci_high"]
        found += slowed["verdict"] == "regressed" and slowed["change"] > 0 and covered
        print(f"trial {trial}: {out['runs']} runs a campaign (baseline pilot spread {out['pilot_spread']:.1%}, "
              f"floor {out['pilot_floor']:.1%}, repeats needed for 20%: {out['repeats_needed'] or '> 1000'}"
              f"{'' if out['sized'] else ': too noisy for the test, which skips its slowdown half'}), "
              f"{time.perf_counter() - t0:.0f} s")
        for name, row in (("neighbour", noisy), ("slowed 30%", slowed)):
            print(f"  {name:10s} {row['verdict']:10s} change {row['change']:+.1%} "
                  f"[CI {row['ci_low']:+.1%}, {row['ci_high']:+.1%}] p_adj {row['p_adjusted']:.2g} "
                  f"floor {row['floor']:.1%} run spread {row['spread_run']:.1%}")
    print(f"{false_verdicts} false verdicts of {args.trials}; {found} of {args.trials} slowdowns found "
          f"(regressed, the interval covering {SLOWDOWN:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
