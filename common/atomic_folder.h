#pragma once
// Several files that belong together (an export's configuration set: one launches the run the
// others describe) put in a folder as one: all of them replaced or none. A partly replaced set
// would launch a run that neither the old nor the new set describes.
//
// How: every file is written and flushed in a staging folder first (beside the folder when
// it does not exist yet, inside it as a hidden `.longctx-staging-*` otherwise, so that both
// are on one file system); a failure there (a full disk, a size limit) leaves the folder as
// it was. Then a new folder is renamed into place whole; into an existing one, each old file
// is first kept by a hard link in the staging folder, then each new file renamed over its
// name, and a failed rename puts every old file back. Renames need no free space, so only a
// crash between two renames can leave a mix. Files of the folder that are not in the set
// are left alone.
#include <map>
#include <string>
#include <vector>

#include "common/result.h"

namespace longctx {

// What a successful write did, by file name.
struct FolderWrite {
  std::vector<std::string> added;     // no such file before
  std::vector<std::string> replaced;  // an old file replaced
};

// REQUIRES: every key of `files` is a plain file name (no '/', not "." or "..").
// BadInput naming `field` when `folder` is not a folder (or cannot be made: its parent is
// missing), or one of the names is held by something other than a regular file (a folder, a
// FIFO); Internal naming the file and the cause when a write fails. On any error the
// folder's files are as they were, and the message says that nothing was written.
Result<FolderWrite> write_files_atomically(const std::string& folder, const std::string& field,
                                           const std::map<std::string, std::string>& files);

}  // namespace longctx
