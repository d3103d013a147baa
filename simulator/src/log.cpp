// The parent of numasim's log categories (one per source file, XBT_LOG_NEW_DEFAULT_SUBCATEGORY):
// `--log=numasim.thresh:debug` turns them all on.
#include <xbt/log.h>

XBT_LOG_NEW_CATEGORY(numasim, "numasim, the NUMA-aware StarPU runtime model");
