#include "planner/core/hub_cache.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/input_file.h"

namespace longctx {
namespace fs = std::filesystem;

namespace {

bool hub_id_part(const std::string& s) {
  if (s.empty() || s.front() == '.') return false;
  for (char c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// A ref file holds one commit hash and a newline; far more than that is no ref.
constexpr std::uint64_t kRefBytes = 4096;

// The revision refs/main names (a commit hash), or "" when the repo has no refs/main or it
// names nothing a revision can be. Read as every input file is (input_file.h): a FIFO or a
// device put there is refused naming --model, never waited on or read without end.
Result<std::string> main_revision(const fs::path& repo) {
  const fs::path ref = repo / "refs" / "main";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(ref, ec))) return std::string();
  LONGCTX_TRY(auto text, read_regular_file(ref.string(), "--model", kRefBytes));
  std::istringstream in(text);
  std::string rev;
  if (!(in >> rev) || !hub_id_part(rev)) return std::string();
  return rev;
}

}  // namespace

bool looks_like_hub_id(const std::string& text) {
  const auto slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos) return false;
  return hub_id_part(text.substr(0, slash)) && hub_id_part(text.substr(slash + 1));
}

std::vector<std::string> hub_cache_folders() {
  std::vector<std::string> out;
  auto add = [&out](const std::string& f) {
    if (!f.empty() && std::find(out.begin(), out.end(), f) == out.end()) out.push_back(f);
  };
  add(env("HF_HUB_CACHE"));
  add(env("HUGGINGFACE_HUB_CACHE"));  // huggingface_hub's older name for it
  if (const std::string home = env("HF_HOME"); !home.empty()) add((fs::path(home) / "hub").string());
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) add((fs::path(xdg) / "huggingface" / "hub").string());
  if (const std::string home = env("HOME"); !home.empty()) add((fs::path(home) / ".cache" / "huggingface" / "hub").string());
  return out;
}

Result<std::string> find_hub_config(const std::string& id) {
  const std::string folder = "models--" + id.substr(0, id.find('/')) + "--" + id.substr(id.find('/') + 1);
  std::vector<std::string> looked;
  std::error_code ec;
  for (const std::string& cache : hub_cache_folders()) {
    const fs::path repo = fs::path(cache) / folder;
    LONGCTX_TRY(const std::string rev, main_revision(repo));
    const fs::path config = repo / "snapshots" / (rev.empty() ? "<refs/main>" : rev) / "config.json";
    if (!rev.empty() && fs::is_regular_file(config, ec)) return config.string();
    looked.push_back(config.string());
  }
  return Error::bad_input(
      "--model", fmt::format("'{}' looks like a Hugging Face Hub id, but no local Hub cache holds its config.json "
                             "(looked at {}); longctx never downloads: run `huggingface-cli download {} config.json` "
                             "or give the model's folder or config.json",
                             id, looked.empty() ? std::string("no cache folder: HF_HUB_CACHE, HF_HOME and HOME are unset")
                                                : fmt::format("{}", fmt::join(looked, ", ")),
                             id));
}

}  // namespace longctx
