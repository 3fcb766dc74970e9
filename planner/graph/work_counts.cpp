#include "planner/graph/work_counts.h"

namespace longctx {

WorkCounts& work_counts() {
  thread_local WorkCounts counts;
  return counts;
}

}  // namespace longctx
