// Fixture: an include of the same component by a local path (allowed).
#include "low.h"
