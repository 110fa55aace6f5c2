// A module includes what it links: the cache sees the store's and util's headers.
#include "store/record.h"
#include "util/status.h"
