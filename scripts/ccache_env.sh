# Sourced by the build scripts: one compiler cache per machine, shared by every clone and build
# folder. Paths relative to the clone and no working directory in the hash, so that every clone
# on the machine (CI's fresh one too) hits the same entries; precompiled headers need the
# sloppiness settings to be cacheable at all.
#   REQUIRES: $root is the clone's root.
export CCACHE_DIR="${CCACHE_DIR:-${LONGCTX_CACHE:-$HOME/.cache/longctx}/ccache}"
export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
