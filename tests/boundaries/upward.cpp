// The store is below the engine: it cannot see the engine's headers.
#include "engine/engine.h"
