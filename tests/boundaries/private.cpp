// The server links the engine but sees only its public headers, not the scheduler's own.
#include "engine/job.h"
