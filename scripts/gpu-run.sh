#!/usr/bin/env bash
# One prepared run on a GPU machine, within 8 minutes: the standard verify, the passive NVML check,
# a quick verify for per-phase timings, the floor measurements (bare torch matmul and copy beside
# gpuenv's figures; NVML benches where present) and the GPU tests that matter most. Each step runs
# under `timeout`; a step that would overrun the budget is skipped and says so. Writes one Markdown
# report with the JSON reports attached: docs/runs/<date>-<gpu>-gpu-run.md (and .json files beside).
# Needs gpuenv and a CUDA build of torch importable by `python3` (or $PYTHON). No edits needed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY="${PYTHON:-python3}"
BUDGET_S="${GPU_RUN_BUDGET_S:-480}"
START=$(date +%s)
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-')
GPU="${GPU:-nogpu}"
STAMP="$(date +%F)-${GPU#nvidia-}"
OUT="docs/runs/$STAMP-gpu-run"
mkdir -p "$OUT"
MD="docs/runs/$STAMP-gpu-run.md"
STEPS="$OUT/steps.tsv"
: > "$STEPS"

# step NAME TIMEOUT_S COMMAND...: runs it under timeout, keeps its output, records rc and seconds
step() {
  local name="$1" limit="$2"; shift 2
  local used=$(( $(date +%s) - START ))
  if (( used + limit > BUDGET_S )); then
    printf '%s\tskipped\t0\t%s s left of %s s, step needs up to %s s\n' "$name" $((BUDGET_S - used)) "$BUDGET_S" "$limit" >> "$STEPS"
    return
  fi
  local t0=$(date +%s.%N) rc
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
  rc=$?
  local secs=$("$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  local note=""
  (( rc == 124 || rc == 137 )) && note="timed out after ${limit} s"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$secs" "$note" >> "$STEPS"
}

step environment 20 sh -c "nvidia-smi; nvidia-smi topo -m; nvidia-smi -q -d PERFORMANCE,POWER,CLOCK; $PY -c 'import torch, gpuenv; print(\"torch\", torch.__version__, torch.version.cuda, \"gpuenv\", gpuenv.__version__)'"
step standard 210 "$PY" -m gpuenv verify --level standard --json --report "$OUT/standard.json" --junit "$OUT/standard.junit.xml"
step passive 30 "$PY" -m gpuenv verify --check nvml --passive --json
if grep -q "No such option" "$OUT/passive.err" 2>/dev/null; then
  printf 'passive-note\t-\t0\tthis gpuenv has no --passive flag yet: not measured\n' >> "$STEPS"
fi
step quick 75 "$PY" -m gpuenv verify --level quick --json --report "$OUT/quick.json"
step floor 45 "$PY" - <<'PYFLOOR'
# Bare torch, no gpuenv: the same 8192^3 matmul and 1 GiB device copy amp times, per GPU.
import json, statistics, torch
out = {}
for i in range(torch.cuda.device_count()):
    dev = torch.device("cuda", i)
    dtype = torch.bfloat16 if torch.cuda.get_device_capability(dev)[0] >= 8 else torch.float16
    a = torch.randn(8192, 8192, device=dev, dtype=dtype); b = torch.randn_like(a)
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev); dst = torch.empty_like(src)
    def rate(work, iters):
        for _ in range(5): work()
        torch.cuda.synchronize(dev); s = []
        for _ in range(3):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with torch.cuda.device(dev):
                e0.record()
                for _ in range(iters): work()
                e1.record()
            e1.synchronize(); s.append(e0.elapsed_time(e1) / 1000 / iters)
        return statistics.median(s)
    out[str(i)] = {"matmul_tflops": round(2 * 8192**3 / rate(lambda: a @ b, 50) / 1e12, 1),
                   "copy_gbps": round(2 * (1 << 30) / rate(lambda: dst.copy_(src), 50) / 1e9, 1)}
    del a, b, src, dst; torch.cuda.empty_cache()
print(json.dumps(out))
PYFLOOR
for bench in bench/bench_*passive*.py bench/bench_nvml*.py; do
  [ -f "$bench" ] && step "bench-$(basename "$bench" .py)" 40 "$PY" "$bench"
done
# the standard run's tests read the report written above instead of running it again
[ -f "$OUT/standard.json" ] && export GPUENV_TEST_STANDARD_REPORT="$PWD/$OUT/standard.json"
step gpu-tests 100 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests/verify/test_gpu.py \
  -k "not models and not parallel and not fp8 and not memory and not onnx and not profiler_timeline and not exclusive"

"$PY" - "$OUT" "$MD" "$BUDGET_S" "$START" <<'PYREPORT'
import json, sys, time
from pathlib import Path
out, md, budget, start = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def load(name):
    p = out / name
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None
lines = [f"# GPU run {out.name}", "", f"Total {time.time() - start:.0f} s of a {budget} s budget.", "", "| step | exit | seconds | note |", "|---|---|---|---|"]
for row in (out / "steps.tsv").read_text().splitlines():
    lines.append("| " + " | ".join(row.split("\t")) + " |")
for level in ("standard", "quick"):
    rep = load(f"{level}.json")
    if not rep:
        lines += ["", f"## {level}: no report"]
        continue
    lines += ["", f"## {level}: {rep['verdict']['summary']}", "", "| check | status | s | summary |", "|---|---|---|---|"]
    for c in rep["checks"]:
        lines.append(f"| {c['name']} | {c['status']} | {c['duration_s']:.1f} | {c['summary'][:160]} |")
    lines += ["", "timings: " + ", ".join(f"{k} {v:g} s" for k, v in rep.get("timings", {}).items())]
    for c in rep["checks"]:
        for f in c["findings"]:
            if f["severity"] != "info":
                lines.append(f"- {f['severity']} {f.get('code')}: {f['message'][:300]}")
rep = load("standard.json")
amp = next((c for c in (rep or {}).get("checks", []) if c["name"] == "amp"), None)
floor = (out / "floor.out").read_text().strip().splitlines() if (out / "floor.out").exists() else []
if amp:
    m = amp["metrics"]
    lines += ["", "## matmul and copy per GPU (gpuenv vs bare torch)", "", f"{m.get('matmul_dtype')} at {m.get('matmul_shape')}", ""]
    bare = json.loads(floor[-1]) if floor else {}
    lines += ["| GPU | TFLOP/s | bare | copy GB/s | bare |", "|---|---|---|---|---|"]
    for i, v in m.get("matmul_tflops", {}).items():
        b = bare.get(i, {})
        lines.append(f"| {i} | {v} | {b.get('matmul_tflops')} | {m.get('copy_gbps', {}).get(i)} | {b.get('copy_gbps')} |")
ar = next((c for c in (rep or {}).get("checks", []) if c["name"] == "allreduce"), None)
if ar:
    lines += ["", "## allreduce sizes", "", "```json", json.dumps(ar["metrics"].get("sizes"), indent=1), "```"]
for name in ("gpu-tests.out", "passive.err"):
    p = out / name
    if p.exists() and p.read_text().strip():
        lines += ["", f"## {name}", "", "```", p.read_text()[-3000:], "```"]
for name in ("standard.json", "quick.json"):
    if load(name):
        lines += ["", f"<details><summary>{name}</summary>", "", "```json", (out / name).read_text(), "```", "", "</details>"]
p = out / "passive.out"
if p.exists() and p.read_text().strip():
    lines += ["", "<details><summary>passive.json</summary>", "", "```json", p.read_text(), "```", "", "</details>"]
md.write_text("\n".join(lines) + "\n")
print(md)
PYREPORT
