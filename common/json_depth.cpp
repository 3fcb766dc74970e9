#include "common/json_depth.h"

#include <vector>

#include <fmt/format.h>

namespace longctx {
namespace {

// One open array or object while scanning.
struct Frame {
  bool object = false;
  bool expecting_key = false;  // objects: the next string is a key
  std::string key;             // objects: the latest key
};

// "model.rope_scaling": the keys of the open objects, down to the first open array.
std::string path_of(const std::vector<Frame>& frames, const std::string& what) {
  std::string path;
  for (const Frame& f : frames) {
    if (!f.object || f.key.empty()) break;
    path += (path.empty() ? "" : ".") + f.key;
  }
  return path.empty() ? what : path;
}

// The index just past the string that starts at text[i] (a '"'), and its raw contents.
std::size_t skip_string(std::string_view text, std::size_t i, std::string* contents) {
  const std::size_t start = ++i;
  while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
  if (contents) *contents = std::string(text.substr(start, std::min(i, text.size()) - start));
  return i + 1;
}

}  // namespace

Result<bool> check_json_depth(std::string_view text, const std::string& what, int max_depth) {
  std::vector<Frame> frames;
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {
      Frame* top = frames.empty() ? nullptr : &frames.back();
      const bool key = top && top->object && top->expecting_key;
      i = skip_string(text, i, key ? &top->key : nullptr);
      if (key) top->expecting_key = false;
      continue;
    }
    if (c == '{' || c == '[') {
      if (static_cast<int>(frames.size()) >= max_depth)
        return Error::bad_input(path_of(frames, what),
                                fmt::format("nests arrays and objects more than {} levels deep (at byte {} of {}); "
                                            "longctx's files nest a few levels: remove the nesting",
                                            max_depth, i, what));
      frames.push_back({c == '{', c == '{', ""});
    } else if (c == '}' || c == ']') {
      if (!frames.empty()) frames.pop_back();
    } else if (c == ',' && !frames.empty() && frames.back().object) {
      frames.back().expecting_key = true;
    }
    ++i;
  }
  return true;
}

}  // namespace longctx
