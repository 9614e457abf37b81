"""Reference values for the RDP accountant (src/optim/privacy), computed with Opacus.

Run:  python3 tests/reference/rdp_accountant.py          # rewrites the fixture
      python3 tests/reference/rdp_accountant.py --check  # exit 1 if it would change
(used: opacus 1.6.0 and scipy 1.17.1 from PyPI). It writes
tests/reference/privacy/rdp_accountant.json. Floats are written with Python's
repr: the shortest decimal that reads back as the same f64.

- `epsilon_cases`: an `RDPAccountant` stepped through `phases` (each phase is
  `steps` calls of `.step(noise_multiplier=..., sample_rate=...)`), its merged
  `history`, and `get_privacy_spent(delta=...)` over the default orders: the
  epsilon and the best order. Noise 0.5 .. 5, sample rates 0.001 .. 1,
  1 .. 10000 steps, delta 1e-7 .. 1e-3, and one accountant whose noise and
  sample rate change between phases.
- `noise_cases`: `get_noise_multiplier(target_epsilon, target_delta,
  sample_rate, steps, accountant="rdp", epsilon_tolerance=0.01)`; the
  cases given in epochs record the steps Opacus derives from them
  (`int(epochs / sample_rate)`). The MNIST-like case is batch 256 of 60000
  for 15 epochs at epsilon 3 and delta 1e-5.
- `unreachable_cases`: targets for which `get_noise_multiplier` raises
  "The privacy budget is too low." (the recorded `error`).
"""
import argparse
import json
import os
import sys
import warnings

import opacus
import scipy
from opacus.accountants import RDPAccountant
from opacus.accountants.utils import get_noise_multiplier

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "privacy", "rdp_accountant.json")

MNIST_RATE = 256 / 60000

# name, phases [(noise_multiplier, sample_rate, steps)], delta
EPSILON_CASES = [
    ("small_noise_one_percent", [(0.5, 0.01, 100)], 1e-5),
    ("unit_noise_one_percent", [(1.0, 0.01, 1000)], 1e-5),
    ("mnist_sigma_1.1_15_epochs", [(1.1, MNIST_RATE, 3515)], 1e-5),
    ("large_noise_tiny_rate", [(5.0, 0.001, 10000)], 1e-6),
    ("small_noise_tiny_rate", [(0.5, 0.001, 10000)], 1e-5),
    ("full_batch_one_step", [(2.0, 1.0, 1)], 1e-5),
    ("full_batch_small_noise", [(0.8, 1.0, 10)], 1e-3),
    ("ten_percent", [(1.5, 0.1, 500)], 1e-5),
    ("noise_3_delta_1e-7", [(3.0, 0.05, 2000)], 1e-7),
    ("half_batch", [(4.0, 0.5, 50)], 1e-5),
    ("one_step", [(1.0, 0.004, 1)], 1e-5),
    ("two_percent_long", [(0.7, 0.02, 5000)], 1e-4),
    ("changing_schedule", [(1.0, 0.01, 100), (2.0, 0.01, 50), (1.0, 0.02, 30), (1.0, 0.02, 20)], 1e-5),
]

# target_epsilon, delta, sample_rate, epochs or None, steps or None
NOISE_CASES = [
    (3.0, 1e-5, MNIST_RATE, 1, None),
    (3.0, 1e-5, MNIST_RATE, 5, None),
    (3.0, 1e-5, MNIST_RATE, 15, None),  # MNIST-like
    (8.0, 1e-5, MNIST_RATE, 1, None),
    (8.0, 1e-5, MNIST_RATE, 5, None),
    (8.0, 1e-5, MNIST_RATE, 15, None),
    (1.0, 1e-6, 0.01, None, 1000),
    (0.5, 1e-5, 1.0, None, 10),
]

# target_epsilon, delta, sample_rate, steps
UNREACHABLE_CASES = [
    (0.01, 1e-5, 1.0, 10000),
    (0.1, 1e-6, 0.05, 1000),
]


def epsilon_case(name, phases, delta):
    acc = RDPAccountant()
    for noise, rate, steps in phases:
        for _ in range(steps):
            acc.step(noise_multiplier=noise, sample_rate=rate)
    eps, order = acc.get_privacy_spent(delta=delta)
    return {
        "name": name,
        "phases": [list(p) for p in phases],
        "history": [list(h) for h in acc.history],
        "delta": delta,
        "epsilon": eps,
        "order": order,
    }


def noise_case(target, delta, rate, epochs, steps):
    kw = {"epochs": epochs} if epochs is not None else {"steps": steps}
    sigma = get_noise_multiplier(
        target_epsilon=target, target_delta=delta, sample_rate=rate,
        accountant="rdp", epsilon_tolerance=0.01, **kw,
    )
    if steps is None:
        steps = int(epochs / rate)  # as get_noise_multiplier derives it
    acc = RDPAccountant()
    acc.history = [(sigma, rate, steps)]
    return {
        "target_epsilon": target,
        "delta": delta,
        "sample_rate": rate,
        "epochs": epochs,
        "steps": steps,
        "noise_multiplier": sigma,
        "epsilon": acc.get_epsilon(delta=delta),
    }


def unreachable_case(target, delta, rate, steps):
    try:
        get_noise_multiplier(target_epsilon=target, target_delta=delta,
                             sample_rate=rate, steps=steps)
    except ValueError as e:
        return {"target_epsilon": target, "delta": delta, "sample_rate": rate,
                "steps": steps, "error": str(e)}
    raise AssertionError(f"target {target} was reached")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # "optimal order is the largest alpha"
    fixture = {
        "opacus": opacus.__version__,
        "scipy": scipy.__version__,
        "epsilon_cases": [epsilon_case(*c) for c in EPSILON_CASES],
        "noise_cases": [noise_case(*c) for c in NOISE_CASES],
        "unreachable_cases": [unreachable_case(*c) for c in UNREACHABLE_CASES],
    }
    text = json.dumps(fixture, indent=1) + "\n"
    if args.check:
        with open(OUT) as f:
            same = f.read() == text
        print("unchanged" if same else f"{OUT} would change")
        sys.exit(0 if same else 1)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
