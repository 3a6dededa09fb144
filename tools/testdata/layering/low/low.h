// Fixture: a lower layer that includes an upper one (the violation the checker must report).
#include <vector>

#include "high/high.h"
#include "low/other.h"
