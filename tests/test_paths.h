// Where a test finds the project's files and the longctx program, wherever the clone lies.
//
// tests/CMakeLists.txt passes both as paths relative to the test program's own folder
// (LONGCTX_SOURCE_FROM_PROGRAM, LONGCTX_CLI_FROM_PROGRAM), never as absolute ones: a clone's
// absolute path in a compile definition makes every clone's command lines differ, and the
// compiler cache the build scripts share between clones (scripts/ccache_env.sh) then misses on
// every test source of every fresh clone. They resolve here against the running program, so a
// test finds its files from any working directory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace longctx::testing {

// The folder of the running test program.
inline const std::filesystem::path& program_folder() {
  static const std::filesystem::path folder = std::filesystem::read_symlink("/proc/self/exe").parent_path();
  return folder;
}

#ifdef LONGCTX_SOURCE_FROM_PROGRAM
// A path inside the clone, e.g. source_path("traces") or source_path("tests/data/configs").
inline std::string source_path(std::string_view inside_clone) {
  return (program_folder() / LONGCTX_SOURCE_FROM_PROGRAM / inside_clone).lexically_normal().string();
}
#endif

#ifdef LONGCTX_CLI_FROM_PROGRAM
// The longctx program of this build (the planner-only one in a planner-only build).
inline const std::string& longctx_cli() {
  static const std::string path = (program_folder() / LONGCTX_CLI_FROM_PROGRAM).lexically_normal().string();
  return path;
}
#endif

}  // namespace longctx::testing
