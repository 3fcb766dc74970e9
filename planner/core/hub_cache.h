#pragma once
// A Hugging Face Hub id ("meta-llama/Llama-3.1-8B") found in the local Hub cache, never on the
// network: huggingface_hub lays a downloaded repository out as
//   <cache>/models--ORG--NAME/refs/main           (the revision main points at)
//   <cache>/models--ORG--NAME/snapshots/<rev>/... (the files of that revision)
// (huggingface_hub/file_download.py, hf_hub_download and _get_pointer_path), where <cache> is
// HF_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub (huggingface_hub/constants.py, HF_HUB_CACHE's defaults).
#include <string>
#include <vector>

#include "common/result.h"

namespace longctx {

// Whether `text` has the shape of a Hub model id: ORG/NAME, each part non-empty, of letters,
// digits, '-', '_' and '.', neither starting with '.'.
bool looks_like_hub_id(const std::string& text);

// The cache folders the environment names, in the order huggingface_hub reads them (each
// once, whether or not it exists).
std::vector<std::string> hub_cache_folders();

// The config.json of `id`'s main revision in the first cache folder that holds one.
// BadInput naming --model and every folder looked in when none does.
Result<std::string> find_hub_config(const std::string& id);

}  // namespace longctx
