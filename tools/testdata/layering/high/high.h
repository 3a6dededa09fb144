// Fixture: the upper layer includes the lower one (allowed).
#include "low/low.h"
