#!/usr/bin/env bash
# The GPU kit proved without a GPU (ctest label gpukit; docs/gpu-kit.md).
#   kit_test.sh LONGCTX WORK_DIR
#
# 1. Packs the kit (scripts/gpu_kit.sh pack: a few seconds once its .deb files are cached
#    in ~/.cache/longctx), so the kit tested is the one the script defines now.
# 2. Configures a build tree from the kit's prefix and the torch of the project's .venv, with
#    the system's prefixes kept out of CMake's search (gpu_kit.sh configure): a package the
#    kit lacks fails here. Then preprocesses the translation units that include the kit's
#    headers (Boost.Graph, CLI11, GoogleTest, gloo through c10d) and fails on any header that
#    comes from a Debian package other than the C and C++ toolchain's, which a GPU image
#    without Debian dev packages would not have.
# 3. Runs the ladder driver (bench/gpu_ladder.py) with --device cpu on the cpu preset and the
#    tiny model, with LONGCTX (already built), and checks the JSON's schema, that predicted
#    and measured stand side by side, and the CPU virtual device's exactness.
#
# Exit 77 (ctest: skipped) with the reason, in WORK_DIR/skipped.txt too, where the kit is not
# packed and Debian's archive cannot be reached to pack it, or the .venv has no torch.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
longctx="$1" work="$2"
mkdir -p "$work"
rm -f "$work/skipped.txt"
kit="${LONGCTX_GPU_KIT:-$root/.gpu-kit}"
t0=$(date +%s)
elapsed() { echo "$(($(date +%s) - t0)) s"; }
skip() {
  echo "SKIPPED: $*" | tee "$work/skipped.txt"
  exit 77
}

rc=0
bash "$root/scripts/gpu_kit.sh" pack || rc=$?
if [ $rc -eq 75 ]; then
  [ -f "$kit/MANIFEST.tsv" ] || skip "the GPU kit is not packed and Debian's archive cannot be reached to pack it"
  echo "note: the archive cannot be reached; testing the kit packed before"
elif [ $rc -ne 0 ]; then
  echo "FAILED: gpu_kit.sh pack exited $rc" >&2
  exit 1
fi
py="$root/.venv/bin/python"
# The venv's torch imports with its CUDA libraries on the path (they are not pip wheels here).
# shellcheck source=scripts/torch_libraries.sh
. "$root/scripts/torch_libraries.sh"
"$py" -c 'import torch' 2>/dev/null || skip "no torch in $root/.venv (scripts/python_env.sh installs it)"
echo "packed: $(elapsed)"

# 2. Configure from the kit alone. The prefix is this build tree's own (under /tmp, as the kit
# requires): a device run or another clone's test unpacks elsewhere.
build="$work/kit-build"
rm -rf "$build"
prefix="/tmp/longctx-kit-test-$(printf '%s' "$work" | sha256sum | cut -c1-12)"
# The unpacked prefix (230 MB) is only read while this test runs: removed however it ends, so
# that clones tested one after another do not fill /tmp.
trap 'rm -rf "$prefix"' EXIT
LONGCTX_KIT_PREFIX="$prefix" bash "$root/scripts/gpu_kit.sh" configure "$build" --device cpu >"$work/configure.log" 2>&1 || {
  tail -n 40 "$work/configure.log" >&2
  echo "FAILED: configuring from the kit (log: $work/configure.log)" >&2
  exit 1
}
echo "configured from the kit: $(elapsed)"

"$py" - "$build/compile_commands.json" "$prefix" "$root" <<'PY'
import json, os, shlex, subprocess, sys
db, prefix, root = sys.argv[1:4]
# One translation unit for each of the kit's header packages that a GPU check compiles.
wanted = ["planner/graph/step_graph.cpp", "cli/longctx/main.cpp", "tests/unit/units_test.cpp", "runtime/src/process_group.cpp"]
entries = {os.path.relpath(e["file"], root): e for e in json.load(open(db))}
headers = set()
for unit in wanted:
    e = entries[unit]
    args = e.get("arguments") or shlex.split(e["command"])
    # The compiler's own command, preprocessing only, with the headers it reads listed.
    cmd, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD"):
            continue
        cmd.append(a)
    if cmd and os.path.basename(cmd[0]) == "ccache":
        cmd = cmd[1:]
    out = subprocess.run(cmd + ["-M"], cwd=e["directory"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"preprocessing {unit} failed:\n{out.stderr[-2000:]}")
    for tok in out.stdout.replace("\\\n", " ").split()[1:]:
        if tok.startswith("/"):
            headers.add(os.path.realpath(tok))
# Headers from the system's own folders: each must belong to the toolchain every image has.
system = sorted(h for h in headers if h.startswith("/usr/") and not h.startswith("/usr/local/cuda"))
toolchain = ("libc6-dev", "linux-libc-dev", "libstdc++-", "libgcc-", "libcrypt-dev", "libnsl-dev", "libtirpc-dev")
owners = {}
if system:
    found = subprocess.run(["dpkg", "-S", *system], capture_output=True, text=True).stdout
    for line in found.splitlines():
        pkg, _, path = line.partition(": ")
        owners[path.strip()] = pkg.split(":")[0]
bad = [f"{h} ({owners.get(h, 'no package')})" for h in system
       if not (owners.get(h, "").startswith(toolchain) or h.startswith("/usr/lib/gcc/"))]
if bad:
    sys.exit("headers from outside the kit, torch, CUDA and the toolchain:\n  " + "\n  ".join(bad))
kit = sum(h.startswith(prefix) for h in headers)
if kit == 0:
    sys.exit(f"no header came from the kit's prefix {prefix}: the units were not compiled against it")
print(f"{len(headers)} headers read by {len(wanted)} units: {kit} from the kit, none from another Debian package")
PY
echo "headers checked: $(elapsed)"

# 3. The ladder on the CPU virtual device, with the binaries already built.
out="$work/out"
rm -rf "$out"
"$py" "$root/bench/gpu_ladder.py" init "$out" --device cpu --commit test
"$py" "$root/bench/gpu_ladder.py" ladder "$out" --longctx "$longctx" --device cpu --work "$work/plans" \
  --rows tiny-plain-2k,tiny-every-technique-4k,tiny-expandable --deadline "$(($(date +%s) + 30))"
"$py" "$root/bench/gpu_ladder.py" report "$out" >/dev/null
"$py" "$root/bench/gpu_ladder.py" check "$out/gpu_kit.json" --min-measured 2
# The check names what is wrong: a measured figure that is no number, and an error that is
# not measured against predicted, must both fail it.
"$py" - "$out/gpu_kit.json" "$work/broken.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
ok = [r for r in doc["rows"] if r["status"] == "ok"]
ok[0]["measured"]["reserved_bytes"] = "12 MiB"
ok[1]["error"]["allocated"] += 0.5
json.dump(doc, open(sys.argv[2], "w"))
PY
if broken=$("$py" "$root/bench/gpu_ladder.py" check "$work/broken.json" 2>&1); then
  echo "FAILED: the schema check passed a document with a string for a size" >&2
  exit 1
fi
for field in "measured\.reserved_bytes: must be a number" "error\.allocated: .* is not \(measured - predicted\) / predicted"; do
  grep -qE "$field" <<<"$broken" || { echo "FAILED: the schema check did not name $field: $broken" >&2; exit 1; }
done
"$py" - "$out/gpu_kit.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
rows = {r["name"]: r for r in doc["rows"]}
problems = []
for name in ("tiny-plain-2k", "tiny-every-technique-4k"):
    r = rows[name]
    if r["status"] != "ok":
        problems.append(f"{name}: {r['status']} ({r['reason']})")
        continue
    # The CPU virtual device counts every byte the plan predicts (docs/validation.md): a row
    # whose two figures are not those of one run is far off.
    if abs(r["error"]["allocated"]) > 0.01:
        problems.append(f"{name}: allocated {r['measured']['allocated_bytes']} measured against "
                        f"{r['predicted']['allocated_bytes']} predicted")
if rows["tiny-expandable"]["status"] != "skipped" or "cuda" not in rows["tiny-expandable"]["reason"]:
    problems.append("tiny-expandable: a CUDA-only row must be skipped on the CPU, saying why")
if problems:
    sys.exit("\n".join(problems))
print("predicted and measured side by side:", ", ".join(
    f"{n} {rows[n]['measured']['allocated_bytes']}/{rows[n]['predicted']['allocated_bytes']} B" for n in
    ("tiny-plain-2k", "tiny-every-technique-4k")))
PY
echo "passed in $(elapsed)"
