#!/usr/bin/env bash
# The GPU kit: everything a bare, offline GPU machine lacks to build longctx, and the one
# command that builds it there and measures it (docs/gpu-kit.md).
#
#   bash scripts/gpu_kit.sh pack
#       Here, with Debian's archive reachable: downloads the .deb files the build needs and a
#       CUDA image with PyTorch lacks (the KIT table below) into .gpu-kit/ (git-ignored), with
#       MANIFEST.tsv. Checks that each package's dependencies are in the kit, in the image, or
#       left out for a stated reason, and that every shared library in the kit finds what it
#       links against. Prints the kit's size; fails over 48 MiB. Exit 75: the archive cannot
#       be reached from here (nothing is wrong with the kit's definition).
#
#   bash scripts/gpu_kit.sh run OUTDIR [--device cpu]
#       On the GPU machine: unpacks the kit into a prefix under /tmp (never into /), configures
#       against the torch of the machine's python3 (its CMake package, lib/ and pip nvidia-*
#       libraries) with the system's own prefixes kept out of CMake's search, builds what the
#       GPU checks need, then runs `ctest -L gpu`, the measured ladder and the max-context
#       check (bench/gpu_ladder.py), each step under its own timeout and all of it inside
#       LONGCTX_KIT_DEADLINE_S (540 s on CUDA). Each step writes its results to OUTDIR as it
#       ends; a step that fails or runs out of time leaves them and the next step runs.
#       OUTDIR gets seven files (gpu_kit.json, gpu_kit.md, kit.log, build.log, ctest.log,
#       ladder.log, plans.tar.gz); the table is printed last.
#       --device cpu: the same on this machine, against the project's .venv torch, on the CPU
#       presets and tiny shapes, without a deadline.
#
#   bash scripts/gpu_kit.sh configure BUILD_DIR [--device cpu]
#       Unpack and configure only (the gpukit test).
#
# Environment: LONGCTX_GPU_KIT (the kit folder, .gpu-kit), LONGCTX_KIT_PREFIX
# (/tmp/longctx-kit), LONGCTX_KIT_BUILD (/tmp/longctx-kit-build), LONGCTX_KIT_PYTHON (the
# python whose torch is built against: python3; .venv/bin/python with --device cpu),
# LONGCTX_KIT_COMMIT (the commit measured, where the tree has no .git), LONGCTX_JOBS (build
# jobs: all cores), LONGCTX_KIT_DEADLINE_S.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kit="${LONGCTX_GPU_KIT:-$root/.gpu-kit}"
CACHE_ROOT="${LONGCTX_CACHE:-$HOME/.cache/longctx}"
MAX_KIT_MIB=48
ARCH_LIB=usr/lib/x86_64-linux-gnu

log() { printf '[gpu_kit] %s\n' "$*" >&2; }
usage() {
  log "usage: gpu_kit.sh pack | run OUTDIR [--device cuda|cpu] | configure BUILD_DIR [--device cuda|cpu]"
  exit 2
}

# The kit: each package, and why the build needs it. Versions are the archive's candidates,
# recorded in MANIFEST.tsv.
KIT=(
  "libfmt-dev|fmt's headers and CMake package (find_package(fmt); the planner links fmt::fmt)"
  "libfmt9|libfmt.so.9, which the planner and every binary link"
  "libcli11-dev|CLI11 (header only; find_package(CLI11))"
  "nlohmann-json3-dev|nlohmann-json (header only; find_package(nlohmann_json))"
  "libboost1.74-dev|Boost's headers and BoostConfig (find_package(Boost))"
  "libboost-graph1.74-dev|Boost.Graph's CMake package and libboost_graph.so (Boost::graph)"
  "libboost-graph1.74.0|libboost_graph.so.1.74.0, linked by the planner"
  "libboost-regex1.74-dev|Boost.Regex's CMake package, which boost_graph-config.cmake loads"
  "libboost-regex1.74.0|libboost_regex.so.1.74.0, which libboost_graph needs"
  "libicu72|ICU 72, which libboost_regex needs (the image has another ICU or none)"
  "libgtest-dev|GoogleTest's libraries, headers and CMake package (find_package(GTest))"
  "libgmock-dev|GoogleMock (GTest::gmock, linked by every test)"
  "libbenchmark-dev|Google Benchmark's CMake package: configuring looks for it (bench/, runtime_bench), no GPU check builds with it"
  "libbenchmark1debian|libbenchmark.so.1debian, which that CMake package names"
  "libgloo-dev|gloo's headers: c10d's ProcessGroupGloo.hpp includes them; LibTorch has gloo built in"
  "zlib1g-dev|zlib.h and libz.so (find_package(ZLIB)); libz.so.1 itself is the image's"
)
# Dependencies of those that the kit leaves out: the image's own (its C and C++ toolchain,
# which nvcc compiles with, and the base system) ...
IMAGE_HAS=(libc6 libc6-dev libc-dev libgcc-s1 libstdc++6 libstdc++-12-dev zlib1g)
# ... and what the build never reads, with why.
LEFT_OUT=(
  "googletest|GoogleTest's sources: libgtest-dev and libgmock-dev carry it built"
  "libboost-serialization1.74-dev|Boost.Graph's graphviz and graphml readers: longctx reads neither"
  "libboost-test1.74-dev|Boost's test framework: longctx's tests use GoogleTest"
  "libicu-dev|ICU's headers, for Boost.Regex's ICU wrappers: nothing longctx compiles includes them"
  "libgloo0|gloo's library: ProcessGroupGloo is compiled into LibTorch, longctx includes only gloo's headers"
  "libhiredis-dev|gloo's Redis store: not among the headers c10d includes"
  "libibverbs-dev|gloo's ibverbs transport: not among the headers c10d includes"
)

names_of() { local e; for e in "$@"; do printf '%s\n' "${e%%|*}"; done; }

# ------------------------------------------------------------------------------------ pack

pack() {
  if ! command -v apt-get >/dev/null || ! command -v apt-cache >/dev/null || ! command -v dpkg-deb >/dev/null; then
    log "apt-get, apt-cache and dpkg-deb are needed to pack the kit: run pack on a Debian machine"
    exit 75
  fi
  local debs="$CACHE_ROOT/gpu-kit-debs" records plan
  mkdir -p "$debs" "$kit"
  local -a names
  mapfile -t names < <(names_of "${KIT[@]}")
  # The archive's record of each package (version, file, checksum, dependencies); an archive
  # whose lists were never fetched knows none of them.
  if ! records=$(apt-cache show --no-all-versions "${names[@]}" 2>/dev/null); then
    log "apt's package lists lack some of the kit's packages: updating them"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -q >&2 || { log "apt-get update failed: the archive cannot be reached"; exit 75; }
    records=$(apt-cache show --no-all-versions "${names[@]}") || { log "a kit package is not in the archive"; exit 1; }
  fi
  # One line a package: name version file sha256; or an error naming an unplaced dependency.
  plan=$(RECORDS="$records" python3 - "${names[*]}" "${IMAGE_HAS[*]}" "$(names_of "${LEFT_OUT[@]}" | tr '\n' ' ')" <<'PY'
import os, re, sys
kit, image, left = (set(a.split()) for a in sys.argv[1:4])
stanzas = [dict(re.findall(r"^([A-Za-z0-9-]+): ?(.*)$", s, re.M)) for s in os.environ["RECORDS"].split("\n\n") if s.strip()]
pkgs = {s["Package"]: s for s in stanzas}
provided = {p.strip().split()[0] for s in stanzas for p in s.get("Provides", "").split(",") if p.strip()}
bad = []
for name in sorted(kit):
    s = pkgs.get(name)
    if s is None:
        bad.append(f"{name}: not in the archive")
        continue
    for field in ("Pre-Depends", "Depends"):
        for group in filter(None, (g.strip() for g in s.get(field, "").split(","))):
            alts = [re.split(r"[ (:]", a.strip(), maxsplit=1)[0] for a in group.split("|")]
            if not any(a in kit or a in image or a in left or a in provided for a in alts):
                bad.append(f"{name} depends on {group!r}: add it to KIT, or to IMAGE_HAS or LEFT_OUT with why")
if bad:
    sys.exit("\n".join(bad))
for name in sorted(kit):
    s = pkgs[name]
    # The name apt-get download gives the file (an epoch's colon written %3a).
    print(name, s["Version"], name + "_" + s["Version"].replace(":", "%3a") + "_" + s["Architecture"] + ".deb", s["SHA256"])
PY
)
  # Download what the cache lacks (or holds with another checksum), by exact version.
  local name version file sha want=() line
  while read -r name version file sha; do
    if [ ! -f "$debs/$file" ] || [ "$(sha256sum "$debs/$file" | cut -d' ' -f1)" != "$sha" ]; then
      rm -f "$debs/$file"
      want+=("$name=$version")
    fi
  done <<<"$plan"
  if [ ${#want[@]} -gt 0 ]; then
    log "downloading ${#want[@]} packages into $debs"
    local out
    # apt's sandbox user cannot write into root's cache; download as the caller.
    if ! out=$(cd "$debs" && apt-get -o APT::Sandbox::User="$(id -un)" download "${want[@]}" 2>&1); then
      printf '%s\n' "$out" >&2
      if grep -qiE 'Could not resolve|Temporary failure|Failed to fetch|Connection|timed out' <<<"$out"; then
        exit 75
      fi
      exit 1
    fi
  fi
  # The kit: exactly these files, checked against the archive's checksums. A kit already
  # holding them was checked when it was written: it stays as it is.
  local manifest="$kit/MANIFEST.tsv.partial"
  {
    printf '# package\tversion\tfile\tsha256\twhy\n'
    while read -r name version file sha; do
      [ "$(sha256sum "$debs/$file" | cut -d' ' -f1)" = "$sha" ] || { log "$file: checksum differs from the archive's"; exit 1; }
      local why
      for line in "${KIT[@]}"; do [ "${line%%|*}" = "$name" ] && why="${line#*|}"; done
      printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$version" "$file" "$sha" "$why"
    done <<<"$plan"
  } >"$manifest"
  if [ -f "$kit/MANIFEST.tsv" ] && cmp -s "$manifest" <(grep -v '^# glibc' "$kit/MANIFEST.tsv") &&
     (cd "$kit" && awk -F'\t' '!/^#/ { print $4 "  " $3 }' MANIFEST.tsv | sha256sum --quiet -c - 2>/dev/null) &&
     [ "$(find "$kit" -maxdepth 1 -name '*.deb' | wc -l)" -eq "$(grep -vc '^#' "$manifest")" ]; then
    rm -f "$manifest"
    log "the kit is up to date"
  else
    find "$kit" -maxdepth 1 -name '*.deb' -delete
    while read -r name version file sha; do
      ln -f "$debs/$file" "$kit/$file" 2>/dev/null || cp "$debs/$file" "$kit/$file"
    done <<<"$plan"
    check_libraries "$kit" >>"$manifest"
    mv "$manifest" "$kit/MANIFEST.tsv"
  fi

  local bytes
  bytes=$(du -sb "$kit" | cut -f1)
  printf 'gpu kit: %s, %d packages, %.1f MiB\n' "$kit" "$(grep -vc '^#' "$kit/MANIFEST.tsv")" \
    "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')"
  if [ "$bytes" -gt $((MAX_KIT_MIB << 20)) ]; then
    log "the kit is over $MAX_KIT_MIB MiB: it travels with the working tree, which may be 64 MiB in all"
    exit 1
  fi
}

# Every shared library in the kit finds each library it links against in the kit or in the
# base system every image has; prints the newest glibc symbol version the kit needs as a
# manifest comment, which `run` holds the machine's glibc to.
check_libraries() {
  local tmp
  tmp=$(mktemp -d)
  local deb
  for deb in "$1"/*.deb; do dpkg-deb -x "$deb" "$tmp"; done
  python3 - "$tmp" <<'PY'
import os, re, subprocess, sys
top = sys.argv[1]
base = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libpthread.so.0",
        "libdl.so.2", "librt.so.1", "libz.so.1"}
have, objects = set(), []
for d, _, files in os.walk(top):
    for f in files:
        if ".so" in f:
            have.add(f)
            p = os.path.join(d, f)
            if not os.path.islink(p):
                objects.append(p)
missing, glibc = [], (0, 0)
for p in objects:
    dyn = subprocess.run(["readelf", "-d", "-W", p], capture_output=True, text=True).stdout
    for lib in re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dyn):
        if lib not in have and lib not in base:
            missing.append(f"{os.path.relpath(p, top)} needs {lib}, which neither the kit nor the base system has")
    syms = subprocess.run(["objdump", "-T", p], capture_output=True, text=True).stdout
    for v in re.findall(r"GLIBC_(\d+)\.(\d+)", syms):
        glibc = max(glibc, tuple(map(int, v)))
if missing:
    sys.exit("\n".join(missing))
print(f"# glibc\t{glibc[0]}.{glibc[1]}")
PY
  rm -rf "$tmp"
}

# ---------------------------------------------------------------------------------- unpack

# Extracts one .deb's files under a prefix: dpkg-deb where the image has it, else Python
# (a .deb is an ar archive holding data.tar.*).
extract_deb() {
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else
    python3 - "$1" "$2" <<'PY'
import io, sys, tarfile
with open(sys.argv[1], "rb") as f:
    data = f.read()
pos = 8  # "!<arch>\n"
while pos < len(data):
    name = data[pos:pos + 16].decode().strip().rstrip("/")
    size = int(data[pos + 48:pos + 58].decode().strip())
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        if name.endswith(".zst"):
            sys.exit(f"{sys.argv[1]}: {name} needs zstd, which this Python cannot read; install dpkg")
        # Debian's own files, checked against the manifest: links to absolute paths included
        # (libz.so), which newer Pythons' default filter refuses.
        trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2], **trusted)
        break
    pos += 60 + size + (size & 1)
PY
  fi
}

# Unpacks the kit into PREFIX (once per manifest) and prints PREFIX.
unpack() {
  local prefix="${LONGCTX_KIT_PREFIX:-/tmp/longctx-kit}"
  case "$prefix" in
    /tmp/*) ;;
    *) log "LONGCTX_KIT_PREFIX must be under /tmp (the kit is never unpacked over the system): $prefix"; exit 2 ;;
  esac
  [ -f "$kit/MANIFEST.tsv" ] || { log "no kit at $kit: run 'bash scripts/gpu_kit.sh pack' on a Debian machine and carry .gpu-kit"; exit 1; }
  local stamp
  stamp=$(sha256sum "$kit/MANIFEST.tsv" | cut -d' ' -f1)
  if [ "$(cat "$prefix/.kit-manifest" 2>/dev/null)" = "$stamp" ]; then
    echo "$prefix"
    return 0
  fi
  local need have
  need=$(awk -F'\t' '$1 == "# glibc" { print $2 }' "$kit/MANIFEST.tsv")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
  if [ -n "$need" ] && [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | sed -n 1p)" != "$need" ]; then
    log "the kit's libraries need glibc $need, this machine has $have: pack it on an older Debian"
    exit 1
  fi
  (cd "$kit" && awk -F'\t' '!/^#/ { print $4 "  " $3 }' MANIFEST.tsv | sha256sum --quiet -c -) ||
    { log "the kit's files differ from MANIFEST.tsv: pack it again"; exit 1; }
  rm -rf "$prefix" && mkdir -p "$prefix"
  local file
  while IFS=$'\t' read -r _ _ file _; do
    extract_deb "$kit/$file" "$prefix"
  done < <(grep -v '^#' "$kit/MANIFEST.tsv")
  # Absolute links point at the system's files: into the prefix where the kit has the target,
  # else (a development link to a base-system library: libz.so) at the system's copy of
  # the library's soname.
  local link target name sys
  while IFS= read -r link; do
    target=$(readlink "$link")
    case "$target" in /*) ;; *) continue ;; esac
    if [ -e "$prefix$target" ]; then
      ln -sfnr "$prefix$target" "$link"
    else
      name=$(basename "$link")
      # ldconfig's line for NAME.N (libz.so.1), the soname a link to NAME stands for. awk
      # reads to the end: leaving early would end ldconfig with SIGPIPE, which pipefail keeps.
      sys=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p) | awk -v n="$name." '
        !found && index($1, n) == 1 && substr($1, length(n) + 1) ~ /^[0-9]+$/ && /x86-64/ { print $NF; found = 1 }')
      if [ -n "$sys" ]; then
        ln -sfn "$sys" "$link"
      else
        log "warning: ${link#"$prefix"} -> $target: the system has no $(basename "$link").N either"
      fi
    fi
  done < <(find "$prefix" -type l)
  echo "$stamp" >"$prefix/.kit-manifest"
  echo "$prefix"
}

# --------------------------------------------------------------------------------- configure

# Sets the variables the build and the runs need: py, torch_dir, libpath (the run path: the
# kit's libraries, torch's lib/, the pip nvidia-* libraries), nccl_include, nccl_library.
discover_torch() {
  local device="$1" cuda=/usr/local/cuda
  py="${LONGCTX_KIT_PYTHON:-}"
  if [ -z "$py" ]; then
    if [ "$device" = cpu ]; then py="$root/.venv/bin/python"; else py=python3; fi
  fi
  if [ "$device" = cpu ]; then
    # The venv's torch is installed without the pip nvidia-* wheels: its CUDA libraries come
    # from the toolkit and LibTorch's cache, as for every Python that imports it here.
    # shellcheck source=scripts/torch_libraries.sh
    . "$root/scripts/torch_libraries.sh"
  fi
  torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))') ||
    { log "$py cannot import torch (LONGCTX_KIT_PYTHON names the python to build against)"; exit 1; }
  torch_cmake=$("$py" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  local site nv=()
  site=$(dirname "$torch_dir")
  if [ -d "$site/nvidia" ]; then
    mapfile -t nv < <(find "$site/nvidia" -mindepth 2 -maxdepth 3 -type d -name lib | sort)
  fi
  libpath="$PREFIX/$ARCH_LIB:$torch_dir/lib"
  local d
  for d in "${nv[@]}"; do libpath="$libpath:$d"; done
  # NCCL: the one torch loads (the pip nvidia-nccl wheel) where it is there, else the toolkit's.
  nccl_include="" nccl_library=""
  for d in "$site/nvidia/nccl/include" "$cuda/include" /usr/include; do
    [ -f "$d/nccl.h" ] && { nccl_include="$d"; break; }
  done
  local libs
  for d in "$site/nvidia/nccl/lib" "$cuda/lib64" "$cuda/lib" /usr/lib/x86_64-linux-gnu; do
    libs=("$d"/libnccl.so*)
    [ -e "${libs[0]}" ] && { nccl_library="${libs[0]}"; break; }
  done
  [ -n "$nccl_include" ] && [ -n "$nccl_library" ] ||
    { log "NCCL not found (nccl.h: '${nccl_include}', libnccl.so: '${nccl_library}') in torch's pip wheels or $cuda"; exit 1; }
  export LD_LIBRARY_PATH="$libpath${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  log "torch: $torch_dir ($("$py" -c 'import torch; print(torch.__version__)'))"
  log "NCCL: $nccl_include, $nccl_library; ${#nv[@]} pip nvidia library folders"
}

configure() {
  local build="$1" device="$2"
  PREFIX=$(unpack)
  discover_torch "$device"
  local cuda=/usr/local/cuda rpath rt
  rpath=$(tr ':' ';' <<<"$libpath")
  # glibc's librt, which FindCUDAToolkit looks for (for cudart_static) under the prefixes
  # ignored below: the base system's, named by ldconfig.
  rt=$( (ldconfig -p 2>/dev/null || /sbin/ldconfig -p) | awk '!found && $1 == "librt.so.1" && /x86-64/ { print $NF; found = 1 }')
  local args=(
    -S "$root" -B "$build" -G Ninja
    # The project's optimisation without its debug information, which only costs build time.
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG"
    -DCMAKE_PREFIX_PATH="$PREFIX/usr;$PREFIX/$ARCH_LIB/cmake;$torch_cmake"
    -DCMAKE_LIBRARY_PATH="$PREFIX/$ARCH_LIB" -DCMAKE_INCLUDE_PATH="$PREFIX/usr/include"
    # The system's prefixes are out of every find_*: a package missing from the kit fails
    # here, on any machine, not on the GPU machine whose image has no Debian dev packages.
    -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local;/"
    -DCUDAToolkit_ROOT="$cuda" -DCMAKE_CUDA_COMPILER="$cuda/bin/nvcc"
    -DNCCL_INCLUDE_DIR="$nccl_include" -DNCCL_LIBRARY="$nccl_library"
    ${rt:+-DCUDAToolkit_rt_LIBRARY="$rt"}
    -DPython_EXECUTABLE="$(command -v "$py")"
    # The kit's, torch's and the pip nvidia libraries on the run path of every binary, as
    # DT_RPATH, which (unlike RUNPATH) also serves the libraries they load (libboost_graph's
    # libboost_regex and ICU); and on the link path, for the libraries torch's libraries need.
    -DCMAKE_BUILD_RPATH="$rpath"
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath-link,$libpath"
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath-link,$libpath"
    # The GPU machine has no compiler cache: build here as there. (OFF, not a -NOTFOUND
    # value, which find_program would search again.)
    -DCCACHE_PROGRAM=OFF
  )
  PATH="$cuda/bin:$PATH" cmake "${args[@]}" >&2
  # Nothing the configure step found may come from the system's own folders (but glibc's
  # librt, given above).
  local leaked
  leaked=$(grep -E '^[A-Za-z0-9_]+:(FILEPATH|PATH)=(/usr(/local)?)?/(include|lib|lib64|share)/' "$build/CMakeCache.txt" |
           grep -v -E '^(CMAKE_|_|CUDAToolkit_rt_LIBRARY:)' || true)
  if [ -n "$leaked" ]; then
    log "configure found these outside the kit, torch and CUDA:"
    printf '%s\n' "$leaked" >&2
    exit 1
  fi
}

# --------------------------------------------------------------------------------------- run

run() {
  local out="$1" device="$2"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  local build="${LONGCTX_KIT_BUILD:-/tmp/longctx-kit-build}" work
  work=$(mktemp -d /tmp/longctx-kit-work.XXXXXX)
  local t0 deadline_s
  t0=$(date +%s)
  # The GPU machine's whole call is short: every step fits inside the deadline. On a
  # two-core development machine the build alone takes over ten minutes, so there is none.
  if [ "$device" = cuda ]; then deadline_s="${LONGCTX_KIT_DEADLINE_S:-540}"; else deadline_s="${LONGCTX_KIT_DEADLINE_S:-0}"; fi
  local end=0
  [ "$deadline_s" -gt 0 ] && end=$((t0 + deadline_s - 15))  # 15 s for the report
  local jobs="${LONGCTX_JOBS:-$(nproc)}"
  local ladder="$root/bench/gpu_ladder.py"
  # Everything this script and its steps print to the console goes to kit.log as well.
  exec > >(tee -a "$out/kit.log") 2>&1
  log "run on --device $device, results into $out, deadline ${deadline_s} s (0: none), $jobs build jobs"

  local commit="${LONGCTX_KIT_COMMIT:-}"
  [ -n "$commit" ] || commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo "unknown: no .git in the tree; set LONGCTX_KIT_COMMIT")
  local boot_py=python3
  [ "$device" = cpu ] && boot_py="${LONGCTX_KIT_PYTHON:-$root/.venv/bin/python}"
  "$boot_py" "$ladder" init "$out" --device "$device" --commit "$commit" --manifest "$kit/MANIFEST.tsv"

  # step NAME CAP_S RESERVE_S FLOOR_S LOG CMD...: runs CMD, its output appended to LOG (empty:
  # the console), and records the outcome in gpu_kit.json. It gets CAP seconds at most, and
  # leaves RESERVE seconds of what is left before the deadline to the later steps, unless
  # that leaves it less than FLOOR (a shorter deadline: the build comes first).
  local last_rc=0
  step() {
    local name="$1" cap="$2" reserve="$3" floor="$4" logfile="$5"
    shift 5
    local limit="$cap" now
    now=$(date +%s)
    if [ "$end" -gt 0 ]; then
      local left=$((end - now)) share
      share=$((left - reserve))
      [ "$share" -lt "$floor" ] && share="$floor"
      [ "$share" -gt "$left" ] && share="$left"
      [ "$share" -lt "$limit" ] && limit="$share"
    fi
    if [ "$limit" -lt 5 ]; then
      log "$name: skipped, the deadline leaves no time for it"
      "$boot_py" "$ladder" step "$out" "$name" skipped 0 --detail "the deadline left no time"
      last_rc=1
      return 0
    fi
    log "$name: up to ${limit} s${logfile:+, output in $(basename "$logfile")}"
    local s rc=0
    s=$(date +%s)
    if [ -n "$logfile" ]; then
      timeout --kill-after=10 "$limit" "$@" >>"$logfile" 2>&1 || rc=$?
    else
      timeout --kill-after=10 "$limit" "$@" || rc=$?
    fi
    local secs=$(($(date +%s) - s)) status=ok detail=""
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      status=timed_out detail="stopped after ${limit} s"
    elif [ $rc -ne 0 ]; then
      # The log's last line, so the table says why where only the printed tail comes back.
      status=failed detail="exit $rc${logfile:+: $(tail -n 1 "$logfile" | cut -c1-200) (see $(basename "$logfile"))}"
    fi
    log "$name: $status in ${secs} s"
    "$boot_py" "$ladder" step "$out" "$name" "$status" "$secs" --detail "$detail"
    last_rc=$rc
  }
  skip() {
    log "$1: skipped ($2)"
    "$boot_py" "$ladder" step "$out" "$1" skipped 0 --detail "$2"
  }

  local cap_build=420 cap_ctest=180
  [ "$device" = cpu ] && cap_build=7200 cap_ctest=1800
  local built=0
  step configure 180 300 60 "$out/build.log" bash "$root/scripts/gpu_kit.sh" configure "$build" --device "$device"
  if [ $last_rc -eq 0 ]; then
    # The environment the binaries run in, made again in this shell as configure made it.
    PREFIX="${LONGCTX_KIT_PREFIX:-/tmp/longctx-kit}"
    discover_torch "$device" 2>>"$out/build.log"
    step build "$cap_build" 150 120 "$out/build.log" cmake --build "$build" -j "$jobs" --target longctx longctx-runtime gpu_tests
    [ $last_rc -eq 0 ] && built=1
  else
    skip build "configure failed"
  fi

  if [ $built = 1 ]; then
    # Tests that take a small part of the GPU run side by side; then the rest one at a time
    # (the real-model tests need most of its memory free). Every test of the label runs; the
    # label is a regular expression, anchored so that gpukit's tests stay out.
    step ctest "$cap_ctest" 120 30 "$out/ctest.log" bash -c '
      small="^(Gpu\.|Techniques/GpuRuntime\.)" rc=0
      ctest --test-dir "$1" -L "^gpu\$" -R "$small" -j 8 --timeout 300 --output-on-failure --output-junit "$2/ctest-small.xml" || rc=$?
      ctest --test-dir "$1" -L "^gpu\$" -E "$small" --timeout 300 --output-on-failure --output-junit "$2/ctest-rest.xml" || rc=$?
      exit $rc' _ "$build" "$work"
    "$boot_py" "$ladder" ctest "$out" "$work/ctest-small.xml" "$work/ctest-rest.xml" || true
    # The ladder leaves the max-context check the time its two runs take on an H200: an 8B
    # model twice, each run about 40 s of start-up (its weights drawn on the CPU) and three
    # steps' time of 3 s (docs/gpu-kit.md).
    local mc_reserve=110
    [ "$device" = cpu ] && mc_reserve=0
    # The driver's own deadline comes 10 s before the step's timeout, so that a row it stops
    # is written down before the driver itself is stopped.
    local ladder_deadline=() mc_deadline=()
    if [ "$end" -gt 0 ]; then
      ladder_deadline=(--deadline "$((end - mc_reserve - 10))")
      mc_deadline=(--deadline "$((end - 10))")
    fi
    step ladder 1800 "$mc_reserve" 0 "" "$py" "$ladder" ladder "$out" --longctx "$build/cli/longctx" \
      --device "$device" --work "$work/plans" "${ladder_deadline[@]}"
    step max_context 1800 0 0 "" "$py" "$ladder" max-context "$out" --longctx "$build/cli/longctx" \
      --device "$device" --work "$work/plans" "${mc_deadline[@]}"
  else
    local s
    for s in ctest ladder max_context; do skip "$s" "nothing was built"; done
  fi
  "$boot_py" "$ladder" step "$out" multi_gpu skipped 0 \
    --detail "one GPU here: the NCCL tests and runs across ranks need two or more (ctest's GpuNccl skips say so too)"
  tar -czf "$out/plans.tar.gz" -C "$work" . 2>/dev/null || true
  # A driver stopped while it rewrote the JSON leaves its temporary behind: not a result.
  rm -f "$out"/.gpu_kit.*.json
  log "done in $(($(date +%s) - t0)) s"
  "$boot_py" "$ladder" report "$out"
}

# ------------------------------------------------------------------------------------ main

[ $# -ge 1 ] || usage
cmd="$1"
shift
device=cuda
parse_device() {
  while [ $# -gt 0 ]; do
    case "$1" in
      --device) [ $# -ge 2 ] || usage; device="$2"; shift 2 ;;
      --device=*) device="${1#--device=}"; shift ;;
      *) log "unknown argument: $1"; usage ;;
    esac
  done
  case "$device" in cuda|cpu) ;; *) log "--device: must be cuda or cpu, found '$device'"; exit 2 ;; esac
}
case "$cmd" in
  pack) [ $# -eq 0 ] || usage; pack ;;
  run) [ $# -ge 1 ] || usage; dir="$1"; shift; parse_device "$@"; run "$dir" "$device" ;;
  configure) [ $# -ge 1 ] || usage; dir="$1"; shift; parse_device "$@"; configure "$dir" "$device" ;;
  *) usage ;;
esac
