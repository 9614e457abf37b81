#!/usr/bin/env python3
"""Runs ONNX's own node conformance cases through retrograd's importer.

The cases are those of `onnx.backend.test.case.node` in the installed
`onnx` package (the suite onnxruntime and other runtimes run): each a
model, its inputs and the expected outputs. The script generates them
(`collect_testcases`, as onnx's backend test data generator does), keeps
those whose graph inputs and outputs are all tensors (no sequences,
optionals, maps or sparse tensors), writes each as a folder
`model.onnx` + `test_data_set_0/{input,output}_K.pb`, and runs them all in
one process of `onnx conformance` (examples/onnx.rs), which compares every
output with ONNX's at ONNX's node-test tolerances (rtol 1e-3, atol 1e-7;
integers and bools exactly; dtype and shape must match). If that process
dies or a case hangs, the case is recorded as such and the run goes on
after it.

It writes, under --out (default tests/reference/onnx/conformance/):
  results.json  every case's op, status and reason, and the pass rates
  table.md      the pass/fail table by op

    python3 tests/reference/onnx_conformance.py [--bin PATH] [--check] [--write]

--check fails (exit 1) if the overall pass rate is below the one recorded
in results.json, or a case recorded as passing no longer passes;
--write replaces the recorded files with this run's. Without --bin the
debug build of the example is built (`cargo build --example onnx`).
Needs onnx and numpy (pip).
"""
import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import warnings
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUT = ROOT / "tests" / "reference" / "onnx" / "conformance"
# A case that makes no progress for this long is recorded as hung.
CASE_TIMEOUT_S = 60


def is_tensor_type(t):
    return t.WhichOneof("value") == "tensor_type"


def collect(work):
    """Writes the tensor-only node cases under `work`; returns [(name, op)]."""
    import numpy as np
    import onnx
    from onnx import numpy_helper
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases(None)
    base_op = {}
    kept = []
    total = 0
    for case in cases:
        total += 1
        graph = case.model.graph
        # An expanded case (the op's function body) counts for its op.
        base = case.name.split("_expanded")[0]
        if case.name == base and len(graph.node) == 1:
            base_op[base] = graph.node[0].op_type
        op = base_op.get(base) or (graph.node[0].op_type if len(graph.node) == 1 else base)
        values = list(graph.input) + list(graph.output)
        if not all(is_tensor_type(v.type) for v in values):
            continue
        inputs, outputs = case.data_sets[0]
        if not all(_is_array(x) for x in list(inputs) + list(outputs)):
            continue
        folder = work / case.name
        data = folder / "test_data_set_0"
        data.mkdir(parents=True, exist_ok=True)
        onnx.save(case.model, str(folder / "model.onnx"))
        for prefix, arrays, infos in (
            ("input", inputs, graph.input),
            ("output", outputs, graph.output),
        ):
            for k, (a, info) in enumerate(zip(arrays, infos)):
                # A numpy scalar (`np.float32(2)`) is a 0-d tensor.
                proto = a if isinstance(a, onnx.TensorProto) else numpy_helper.from_array(np.asarray(a), info.name)
                (data / f"{prefix}_{k}.pb").write_bytes(proto.SerializeToString())
        kept.append((case.name, op))
    return kept, total


def _is_array(x):
    import numpy as np
    import onnx

    return isinstance(x, (np.ndarray, np.generic, onnx.TensorProto))


def build_binary():
    subprocess.run(
        ["cargo", "build", "--quiet", "--example", "onnx"], cwd=ROOT, check=True
    )
    return ROOT / "target" / "debug" / "examples" / "onnx"


def run_cases(binary, list_file, n):
    """Runs every case, restarting the process after a crash or a hang."""
    results = {}
    start = 0
    while start < n:
        proc = subprocess.Popen(
            [str(binary), "conformance", str(list_file), "--from", str(start)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines = queue.Queue()

        def read(stream=proc.stdout):
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=read, daemon=True).start()
        stderr_tail = []
        threading.Thread(
            target=lambda: stderr_tail.extend(proc.stderr.read().splitlines()[-3:]),
            daemon=True,
        ).start()
        expected = start
        while True:
            try:
                line = lines.get(timeout=CASE_TIMEOUT_S)
            except queue.Empty:
                proc.kill()
                results[expected] = ("hang", f"no result within {CASE_TIMEOUT_S} s")
                expected += 1
                break
            if line is None:
                proc.wait()
                if expected < n:
                    why = " ".join(stderr_tail) or f"exit status {proc.returncode}"
                    results[expected] = ("crash", f"the process died: {why}")
                    expected += 1
                break
            r = json.loads(line)
            results[r["index"]] = (r["status"], r["detail"])
            expected = r["index"] + 1
        proc.stdout.close()
        proc.wait()
        start = expected
    return results


def run_onnxruntime(work, kept):
    """Runs the same cases in onnxruntime, compared the same way; the
    pass count, for the rate beside retrograd's."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    passed = 0
    for name, _ in kept:
        folder = work / name
        data = folder / "test_data_set_0"

        def read(prefix):
            out, k = [], 0
            while (data / f"{prefix}_{k}.pb").exists():
                t = onnx.TensorProto()
                t.ParseFromString((data / f"{prefix}_{k}.pb").read_bytes())
                out.append(numpy_helper.to_array(t))
                k += 1
            return out

        try:
            so = ort.SessionOptions()
            so.log_severity_level = 4
            s = ort.InferenceSession(str(folder / "model.onnx"), so, providers=["CPUExecutionProvider"])
            feed = {i.name: a for i, a in zip(s.get_inputs(), read("input"))}
            got = s.run(None, feed)
            ok = True
            for g, w in zip(got, read("output")):
                g = np.asarray(g)
                if g.dtype != w.dtype or g.shape != w.shape:
                    ok = False
                elif w.dtype.kind in "fc":
                    ok = ok and np.allclose(g, w, rtol=1e-3, atol=1e-7, equal_nan=True)
                else:
                    ok = ok and np.array_equal(g, w)
            passed += ok
        except Exception:  # noqa: BLE001 - any refusal or failure is a failed case
            pass
    return passed


def rate(rows):
    passed = sum(1 for r in rows if r["status"] == "pass")
    return passed, len(rows), (passed / len(rows) if rows else 0.0)


def summarize(rows, supported, total, onnx_version):
    ops = defaultdict(list)
    for r in rows:
        ops[r["op"]].append(r)
    sup_rows = [r for r in rows if r["op"] in supported]
    p, n, frac = rate(rows)
    sp, sn, sfrac = rate(sup_rows)
    summary = {
        "onnx_version": onnx_version,
        "node_cases": total,
        "tensor_cases": n,
        "passed": p,
        "pass_rate": round(frac, 4),
        "supported_ops_cases": sn,
        "supported_ops_passed": sp,
        "supported_ops_pass_rate": round(sfrac, 4),
    }
    by_op = {}
    for op, rs in sorted(ops.items()):
        statuses = defaultdict(int)
        for r in rs:
            statuses[r["status"]] += 1
        by_op[op] = {
            "cases": len(rs),
            "passed": statuses["pass"],
            "supported": op in supported,
            "statuses": dict(sorted(statuses.items())),
        }
    return summary, by_op


def markdown(summary, by_op, rows):
    s = summary
    out = [
        "# ONNX node conformance",
        "",
        "Written by `tests/reference/onnx_conformance.py`: ONNX's node cases "
        f"(onnx {s['onnx_version']}) whose inputs and outputs are tensors, run "
        "through retrograd's importer and compared with ONNX's expected outputs "
        "(rtol 1e-3, atol 1e-7).",
        "",
        f"- all {s['tensor_cases']} tensor cases (of {s['node_cases']}): "
        f"**{s['passed']} pass ({100 * s['pass_rate']:.1f}%)**",
        f"- the {s['supported_ops_cases']} cases of ops the importer supports: "
        f"**{s['supported_ops_passed']} pass ({100 * s['supported_ops_pass_rate']:.1f}%)**",
        "",
        "| op | supported | cases | pass | other outcomes | first failing case |",
        "|---|---|---:|---:|---|---|",
    ]
    first_fail = {}
    for r in rows:
        if r["status"] != "pass" and r["op"] not in first_fail:
            detail = r["detail"].replace("|", "\\|").replace("\n", " ")
            if len(detail) > 110:
                detail = detail[:107] + "..."
            first_fail[r["op"]] = f"`{r['case']}`: {detail}"
    for op, o in by_op.items():
        other = ", ".join(f"{k} {v}" for k, v in o["statuses"].items() if k != "pass")
        out.append(
            f"| {op} | {'yes' if o['supported'] else 'no'} | {o['cases']} | {o['passed']} "
            f"| {other} | {first_fail.get(op, '')} |"
        )
    return "\n".join(out) + "\n"


def supported_ops(binary):
    """The op types the importer runs, as `onnx ops` prints them."""
    text = subprocess.run(
        [str(binary), "ops"], check=True, capture_output=True, text=True
    ).stdout
    return {line.split()[0] for line in text.splitlines() if line.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path, help="the onnx example binary (default: build the debug one)")
    ap.add_argument("--work", type=Path, default=ROOT / "target" / "onnx-conformance")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--check", action="store_true", help="fail if a pass rate drops below the recorded one")
    ap.add_argument("--write", action="store_true", help="record this run's results under --out")
    ap.add_argument(
        "--onnxruntime", action="store_true", help="also run the same cases in onnxruntime and print its rate"
    )
    a = ap.parse_args()

    import onnx

    binary = a.bin or build_binary()
    work = a.work
    if work.exists():
        import shutil

        shutil.rmtree(work)
    work.mkdir(parents=True)
    kept, total = collect(work)
    list_file = work / "cases.txt"
    list_file.write_text("".join(f"{work / name}\n" for name, _ in kept))
    results = run_cases(binary, list_file, len(kept))
    rows = [
        {"case": name, "op": op, "status": results[i][0], "detail": results[i][1][:300]}
        for i, (name, op) in enumerate(kept)
    ]
    supported = supported_ops(binary)
    summary, by_op = summarize(rows, supported, total, onnx.__version__)
    print(
        f"ONNX node conformance (onnx {onnx.__version__}): {summary['passed']} of "
        f"{summary['tensor_cases']} tensor cases pass ({100 * summary['pass_rate']:.1f}%); "
        f"ops the importer supports: {summary['supported_ops_passed']} of "
        f"{summary['supported_ops_cases']} ({100 * summary['supported_ops_pass_rate']:.1f}%)"
    )
    if a.onnxruntime:
        n = run_onnxruntime(work, kept)
        print(f"onnxruntime on the same cases: {n} of {len(kept)} pass ({100 * n / len(kept):.1f}%)")
    broken = [r for r in rows if r["status"] in ("panic", "crash", "hang")]
    for r in broken:
        print(f"  {r['status']}: {r['case']}: {r['detail']}")

    recorded_path = a.out / "results.json"
    failed = False
    if a.check:
        recorded = json.loads(recorded_path.read_text())["summary"]
        if recorded["onnx_version"] != summary["onnx_version"]:
            print(
                f"note: recorded with onnx {recorded['onnx_version']}, run with "
                f"{summary['onnx_version']}: the case sets may differ"
            )
        # The rate over supported ops is reported, not checked: a newly
        # supported op that passes some of its cases lowers it.
        if summary["pass_rate"] < recorded["pass_rate"]:
            print(
                f"FAIL: pass rate {summary['pass_rate']:.4f} is below the recorded "
                f"{recorded['pass_rate']:.4f}"
            )
            failed = True
        lost = [
            r["case"]
            for r in json.loads(recorded_path.read_text())["cases"]
            if r["status"] == "pass"
        ]
        now = {r["case"]: r["status"] for r in rows}
        # Cases another onnx version does not generate are not counted.
        regressed = [c for c in lost if c in now and now[c] != "pass"]
        if regressed:
            print(f"FAIL: {len(regressed)} recorded passing cases no longer pass: {', '.join(regressed[:20])}")
            failed = True
    if broken:
        print("FAIL: a case panicked, crashed or hung (errors must be typed)")
        failed = True
    if a.write:
        a.out.mkdir(parents=True, exist_ok=True)
        # One line per op and per case: diffs between runs stay readable.
        lines = ['{"summary": ' + json.dumps(summary) + ",", '"ops": {']
        lines += [
            f"{json.dumps(op)}: {json.dumps(o)}" + ("," if i + 1 < len(by_op) else "")
            for i, (op, o) in enumerate(by_op.items())
        ]
        lines += ["},", '"cases": [']
        lines += [json.dumps(r) + ("," if i + 1 < len(rows) else "") for i, r in enumerate(rows)]
        lines += ["]}"]
        recorded_path.write_text("\n".join(lines) + "\n")
        (a.out / "table.md").write_text(markdown(summary, by_op, rows))
        print(f"wrote {recorded_path} and {a.out / 'table.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
