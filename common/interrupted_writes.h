#pragma once
// Files being written when the process is interrupted: AtomicFile (atomic_file.h) writes each
// under a hidden temporary name and removes it on every error path, but SIGINT or SIGTERM end
// the process without unwinding, so `run --trace` stopped with Ctrl-C left
// `.trace.json.tmp-XXXXXX` files beside the user's, an allocation log's growing by the step.
// The temporaries open at the moment are noted here, and a handler removes them before the
// signal ends the process as it would have.
#include <string>

namespace longctx {

// Installs, once, handlers of SIGINT, SIGTERM and SIGHUP that unlink every temporary noted
// and then end the process by the same signal (its default action, so the exit status reads
// as the signal's). A signal whose handler is not the default one is left to it.
void remove_temporaries_when_interrupted();

// AtomicFile's: a temporary created, and one renamed into place or removed. At most 64 are
// noted at once (a command writes a handful); past that a temporary goes unnoted.
void note_temporary(const std::string& path);
void forget_temporary(const std::string& path);

}  // namespace longctx
