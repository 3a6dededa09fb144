// Fixture: a test of the lower layer may include the upper one (third column).
#include "high/high.h"
