"""Reference values for tests/optim_reference.rs, computed with PyTorch.

Run:  python3 tests/reference/optim_reference.py          # rewrites optim_cases.rs
      python3 tests/reference/optim_reference.py --check  # exit 1 if it would change
(used: torch 2.15.0 from PyPI, on the CPU, one thread). It writes
tests/reference/optim_cases.rs beside this script. Floats are printed with
Python's repr: the shortest decimal that reads back as the same f64.

Per-parameter optimizers. Two parameters, w [2, 3] and b [3], and the loss
    sum(tanh(w * A) * C) + sum(sigmoid(b) * D) + 0.5 * sum(b * b)
in float64, from the same start for every case.
- `CASES`: three steps, w and b after every step. The "clip" cases clip the
  global gradient norm (torch.nn.utils.clip_grad_norm_) before each step
  and record the norm. The "groups" cases put w and b in two parameter
  groups (nanoGPT's split: weight decay on the matrix w, none on the vector
  b); a case whose `make` returns (optimizer, scheduler) steps the
  scheduler after each optimizer step.
- `RULE_CASES`: five steps. At step `skip` (1-based) the loss leaves out
  b's terms, so b has no gradient (its `.grad` is None) and PyTorch skips
  it; after step `reload` the optimizer's state dict is loaded into a new
  optimizer, which takes the remaining steps.

L-BFGS (closure form). Parameters x [3], y [3] and u [2] (u is not in the
loss: no gradient, which L-BFGS counts as zeros), the Rosenbrock function
    sum((1 - x)^2 + 100 (y - x^2)^2)
(negated for the `maximize` case). `LBFGS_CASES`: several `step(closure)`
calls; after each, x, y and u, the loss `step` returned, and the state's
`func_evals` and `n_iter`; `reload` as above.
"""
import argparse
import os
import sys
import tempfile

import torch

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "optim_cases.rs")

W0 = [[0.5, -1.2, 0.3], [0.8, 0.1, -0.7]]
B0 = [0.2, -0.4, 1.1]
A = [[1.0, 2.0, -1.0], [0.5, -1.5, 2.0]]
C = [[0.3, -0.6, 0.9], [1.2, 0.4, -0.8]]
D = [1.0, -2.0, 0.5]

X0 = [-1.2, 0.5, 1.5]
Y0 = [1.0, -0.3, 2.0]
U0 = [0.3, -0.7]

O = torch.optim


def groups(p):
    """nanoGPT's configure_optimizers: decay on parameters of rank >= 2."""
    decay = [t for t in p if t.dim() >= 2]
    no_decay = [t for t in p if t.dim() < 2]
    return [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]


def two_groups(p, lr, w_decay=0.1):
    """w with weight decay, b without and at half the learning rate."""
    return [{"params": [p[0]], "weight_decay": w_decay}, {"params": [p[1]], "weight_decay": 0.0, "lr": lr / 2}]


def with_step_lr(opt):
    return opt, O.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


CASES = [
    ("sgd", lambda p: O.SGD(p, lr=0.1), None),
    ("sgd_momentum_dampening_wd", lambda p: O.SGD(p, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01), None),
    ("sgd_nesterov_wd", lambda p: O.SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.05), None),
    ("sgd_maximize", lambda p: O.SGD(p, lr=0.1, momentum=0.5, maximize=True), None),
    ("adam", lambda p: O.Adam(p, lr=0.01), None),
    ("adam_l2_amsgrad", lambda p: O.Adam(p, lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1, amsgrad=True), None),
    ("adamw", lambda p: O.AdamW(p, lr=0.01), None),
    ("adamw_wd_amsgrad", lambda p: O.AdamW(p, lr=0.05, weight_decay=0.3, amsgrad=True), None),
    ("sgd_clip", lambda p: O.SGD(p, lr=0.1, momentum=0.9), 0.5),
    ("adam_clip", lambda p: O.Adam(p, lr=0.01), 1.0),
    ("adamw_groups", lambda p: O.AdamW(groups(p), lr=0.01, betas=(0.9, 0.99)), None),
    ("adamw_groups_lr_step_schedule", lambda p: with_step_lr(O.AdamW(
        [{"params": [p[0]], "weight_decay": 0.1}, {"params": [p[1]], "weight_decay": 0.0, "lr": 0.025}],
        lr=0.05, betas=(0.9, 0.99), amsgrad=True)), None),
]

# (name, make, skip, reload): `skip` and `reload` are 1-based steps or None.
RULE_CASES = [
    # The converted optimizers through the shared code: skipped parameters,
    # groups and state reloads.
    ("sgd_nesterov_groups_skip_reload", lambda p: O.SGD(two_groups(p, 0.1, 0.01), lr=0.1, momentum=0.9, nesterov=True), 2, 3),
    ("sgd_dampening_wd_maximize_skip_reload", lambda p: O.SGD(p, lr=0.1, momentum=0.5, dampening=0.3, weight_decay=0.02, maximize=True), 3, 2),
    ("adam_l2_amsgrad_skip_reload", lambda p: O.Adam(p, lr=0.05, weight_decay=0.1, amsgrad=True), 2, 3),
    ("adamw_groups_skip_first_reload", lambda p: O.AdamW(two_groups(p, 0.05), lr=0.05), 1, 3),
    # RMSprop: every option.
    ("rmsprop", lambda p: O.RMSprop(p), None, None),
    ("rmsprop_alpha_eps_wd_skip_reload", lambda p: O.RMSprop(p, lr=0.02, alpha=0.9, eps=1e-4, weight_decay=0.1), 2, 3),
    ("rmsprop_momentum_skip_reload", lambda p: O.RMSprop(p, momentum=0.9), 2, 3),
    ("rmsprop_centered_skip_first_reload", lambda p: O.RMSprop(p, centered=True), 1, 2),
    ("rmsprop_centered_momentum_maximize", lambda p: O.RMSprop(
        p, lr=0.03, alpha=0.5, weight_decay=0.05, momentum=0.5, centered=True, maximize=True), 2, 3),
    ("rmsprop_groups_momentum", lambda p: O.RMSprop(two_groups(p, 0.01), lr=0.01, momentum=0.3), 3, 2),
    # Adagrad: every option.
    ("adagrad", lambda p: O.Adagrad(p, lr=0.1), None, None),
    ("adagrad_lr_decay_wd_skip_reload", lambda p: O.Adagrad(p, lr=0.1, lr_decay=0.5, weight_decay=0.05), 2, 3),
    ("adagrad_initial_accumulator_eps_skip_first", lambda p: O.Adagrad(
        p, lr=0.2, lr_decay=0.1, initial_accumulator_value=0.5, eps=1e-3), 1, 3),
    ("adagrad_maximize_reload", lambda p: O.Adagrad(p, lr=0.05, maximize=True), None, 2),
    ("adagrad_groups", lambda p: O.Adagrad(two_groups(p, 0.1), lr=0.1, lr_decay=0.1), 2, 3),
]
RULE_STEPS = 5

# (name, LBFGS keyword arguments, steps, reload, maximize)
LBFGS_CASES = [
    ("lbfgs_fixed_step", dict(lr=0.001, max_iter=10), 3, None, False),
    ("lbfgs_fixed_step_history2_reload", dict(lr=0.002, max_iter=6, history_size=2), 4, 2, False),
    ("lbfgs_strong_wolfe", dict(lr=1, max_iter=10, line_search_fn="strong_wolfe"), 4, None, False),
    ("lbfgs_strong_wolfe_history3_max_eval_reload",
     dict(lr=1, max_iter=20, max_eval=14, history_size=3, line_search_fn="strong_wolfe"), 4, 2, False),
    ("lbfgs_strong_wolfe_tolerances",
     dict(lr=1, max_iter=50, tolerance_grad=1e-4, tolerance_change=1e-6, line_search_fn="strong_wolfe"), 4, None, False),
    # Out of evaluations inside the line search; the zoom's "old high becomes low".
    ("lbfgs_strong_wolfe_history1_budget5_reload",
     dict(lr=2, max_iter=15, max_eval=5, history_size=1, line_search_fn="strong_wolfe"), 4, 2, False),
    # Long first trials: zooms that move off the bracket's low end.
    ("lbfgs_strong_wolfe_long_trials", dict(lr=100, max_iter=20, history_size=3, line_search_fn="strong_wolfe"), 3, None, False),
    ("lbfgs_strong_wolfe_maximize_reload", dict(lr=0.5, max_iter=8, line_search_fn="strong_wolfe"), 3, 1, True),
    ("lbfgs_first_evaluation_optimal", dict(tolerance_grad=1e3), 2, 1, False),
]


def rule_loss(w, b, with_b=True):
    a, c, d = torch.tensor(A), torch.tensor(C), torch.tensor(D)
    loss = (torch.tanh(w * a) * c).sum()
    if with_b:
        loss = loss + (torch.sigmoid(b) * d).sum() + 0.5 * (b * b).sum()
    return loss


def run(make, clip):
    w = torch.tensor(W0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    made = make([w, b])
    opt, sched = made if isinstance(made, tuple) else (made, None)
    out = []
    for _ in range(3):
        opt.zero_grad()
        rule_loss(w, b).backward()
        norm = float("nan")
        if clip is not None:
            norm = float(torch.nn.utils.clip_grad_norm_([w, b], clip))
        opt.step()
        if sched is not None:
            sched.step()
        out.append((w.detach().flatten().tolist() + b.detach().tolist(), norm))
    return out


def reloaded(opt, make, params):
    """A new optimizer over `params` with `opt`'s state."""
    fresh = make(params)
    fresh.load_state_dict(opt.state_dict())
    return fresh


def run_rule(make, skip, reload):
    w = torch.tensor(W0, requires_grad=True)
    b = torch.tensor(B0, requires_grad=True)
    opt = make([w, b])
    out = []
    for step in range(1, RULE_STEPS + 1):
        opt.zero_grad()  # sets .grad to None
        rule_loss(w, b, with_b=step != skip).backward()
        assert (b.grad is None) == (step == skip)
        opt.step()
        out.append(w.detach().flatten().tolist() + b.detach().tolist())
        if step == reload:
            opt = reloaded(opt, make, [w, b])
    return out


def run_lbfgs(kwargs, steps, reload, maximize):
    x = torch.tensor(X0, requires_grad=True)
    y = torch.tensor(Y0, requires_grad=True)
    u = torch.tensor(U0, requires_grad=True)
    make = lambda p: O.LBFGS(p, maximize=maximize, **kwargs)
    opt = make([x, y, u])

    def closure():
        opt.zero_grad()
        a = 1 - x
        b = y - x * x
        loss = (a * a + (b * b) * 100.0).sum()
        if maximize:
            loss = -loss
        loss.backward()
        return loss

    out = []
    for step in range(1, steps + 1):
        loss = float(opt.step(closure))
        state = opt.state[x]
        values = x.detach().tolist() + y.detach().tolist() + u.detach().tolist()
        out.append((values, loss, state["func_evals"], state["n_iter"]))
        if step == reload:
            opt = reloaded(opt, make, [x, y, u])
    return out


def f64(x):
    if x != x:
        return "f64::NAN"
    r = repr(float(x))
    return r if ("e" in r or "." in r or "inf" in r) else r + ".0"


def values(vs):
    return "[" + ", ".join(f64(v) for v in vs) + "]"


def option(v):
    return "None" if v is None else f"Some({v})"


def generate():
    out = [f"""//! Optimizer reference values from PyTorch (float64): generated by
//! `tests/reference/optim_reference.py` (torch {torch.__version__.split("+")[0]}); do not edit, rerun
//! the script (`--check` says whether this file is current). The problems
//! and the cases are described there.

/// After one step: w (6 values, row-major) then b (3), and the clip norm (NaN: no clipping).
pub type Step = ([f64; 9], f64);

/// Per case: after each of three steps, w then b, and the clip norm.
#[rustfmt::skip]
pub const CASES: &[(&str, [Step; 3])] = &[
"""]
    for name, make, clip in CASES:
        out.append(f'    ("{name}", [\n')
        for vs, norm in run(make, clip):
            out.append(f"        ({values(vs)}, {f64(norm)}),\n")
        out.append("    ]),\n")
    out.append("];\n\n")

    out.append(f"""/// Steps of every `RULE_CASES` case.
pub const RULE_STEPS: usize = {RULE_STEPS};

/// A per-parameter case: its name, the step at which b has no gradient, the
/// step after which the state is reloaded, and w then b after each step.
pub type RuleCase = (
    &'static str,
    Option<usize>,
    Option<usize>,
    [[f64; 9]; RULE_STEPS],
);

/// The per-parameter cases.
#[rustfmt::skip]
pub const RULE_CASES: &[RuleCase] = &[
""")
    for name, make, skip, reload in RULE_CASES:
        out.append(f'    ("{name}", {option(skip)}, {option(reload)}, [\n')
        for vs in run_rule(make, skip, reload):
            out.append(f"        {values(vs)},\n")
        out.append("    ]),\n")
    out.append("];\n\n")

    out.append("""/// After one L-BFGS step: x, y and u, the loss `step` returned, and the
/// state's `func_evals` and `n_iter`.
pub type LbfgsStep = ([f64; 8], f64, u64, u64);

/// An L-BFGS case: its name, the step after which the state is reloaded,
/// and the steps.
pub type LbfgsCase = (&'static str, Option<usize>, &'static [LbfgsStep]);

/// The L-BFGS cases.
#[rustfmt::skip]
pub const LBFGS_CASES: &[LbfgsCase] = &[
""")
    for name, kwargs, steps, reload, maximize in LBFGS_CASES:
        out.append(f'    ("{name}", {option(reload)}, &[\n')
        for vs, loss, evals, iters in run_lbfgs(kwargs, steps, reload, maximize):
            out.append(f"        ({values(vs)}, {f64(loss)}, {evals}, {iters}),\n")
        out.append("    ]),\n")
    out.append("];\n")
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    args = ap.parse_args()
    text = generate()
    if args.check:
        with open(OUT) as f:
            same = f.read() == text
        print("optim_cases.rs is current" if same else "optim_cases.rs would change")
        sys.exit(0 if same else 1)
    with tempfile.NamedTemporaryFile("w", dir=HERE, delete=False, suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, OUT)


if __name__ == "__main__":
    main()
