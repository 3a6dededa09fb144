/* Checks a header tree against the frozen layout of ABI 1.0 (layout_1_0.inc). Compiled three times:
 *  - against abi-1.0/ with OAR_FROZEN_EXACT=1: the frozen copy itself was not edited (every offset, size,
 *    enumerator and macro, including the sizes that only 1.0 has);
 *  - against sdk/include: today's headers keep every 1.0 member where 1.0 put it (append-only rule);
 *  - against abi-1.2-sim/: the simulated minor bump is a legal one.
 * Offsets and sizes are compile-time checks (the build fails naming the member); string macros are
 * compared at run time. C11 for _Static_assert; the headers themselves stay C99. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "oar/plugin/plugin.h"

#if !defined(__LP64__)
#error "layout_1_0.inc records the LP64 layout"
#endif

#ifndef OAR_FROZEN_EXACT
#define OAR_FROZEN_EXACT 0
#endif

/* ---- pass 1, file scope: compile-time checks ------------------------------------------------------ */
#define OAR_FROZEN_FIELD(T, m, off, size)                                                      \
  _Static_assert(offsetof(T, m) == (off), #T "." #m " moved: ABI 1.0 has it at byte " #off); \
  _Static_assert(sizeof(((T*)0)->m) == (size), #T "." #m " changed size: ABI 1.0 has " #size " bytes");
#define OAR_FROZEN_ELEMENT_SIZEOF(T, size) \
  _Static_assert(sizeof(T) == (size), #T " is an array element: its size " #size " is frozen for ABI 1.x");
#define OAR_FROZEN_INT(name, value) _Static_assert((name) == (value), #name " must stay " #value " in ABI 1.x");
#if OAR_FROZEN_EXACT
#define OAR_FROZEN_SIZEOF(T, size) _Static_assert(sizeof(T) == (size), "frozen copy: sizeof(" #T ") was " #size);
#define OAR_FROZEN_INT_EXACT(name, value) _Static_assert((name) == (value), "frozen copy: " #name " was " #value);
#else
#define OAR_FROZEN_SIZEOF(T, size) \
  _Static_assert(sizeof(T) >= (size), #T " shrank below its ABI 1.0 size " #size);
#define OAR_FROZEN_INT_EXACT(name, value) /* grows with each minor */
#endif
#define OAR_FROZEN_STRING(name, value) /* run time, below */
#include "layout_1_0.inc"
#undef OAR_FROZEN_FIELD
#undef OAR_FROZEN_ELEMENT_SIZEOF
#undef OAR_FROZEN_SIZEOF
#undef OAR_FROZEN_INT
#undef OAR_FROZEN_INT_EXACT
#undef OAR_FROZEN_STRING

/* ---- pass 2, run time: string macros ---------------------------------------------------------------- */
int main(void) {
  int failures = 0;
  int checked = 0;
#define OAR_FROZEN_FIELD(T, m, off, size) ++checked;
#define OAR_FROZEN_ELEMENT_SIZEOF(T, size) ++checked;
#define OAR_FROZEN_SIZEOF(T, size) ++checked;
#define OAR_FROZEN_INT(name, value) ++checked;
#define OAR_FROZEN_INT_EXACT(name, value) ++checked;
#define OAR_FROZEN_STRING(name, value)                                                              \
  ++checked;                                                                                        \
  if (strcmp(name, value) != 0) {                                                                   \
    printf("FAIL %s is \"%s\"; ABI 1.0 fixed it to \"%s\"\n", #name, name, value);                   \
    ++failures;                                                                                     \
  }
#include "layout_1_0.inc"
  printf("%s: %d frozen ABI 1.0 items checked against headers of ABI %d.%d%s, %d failed\n",
         failures ? "FAIL" : "ok", checked, OAR_PLUGIN_ABI_MAJOR, OAR_PLUGIN_ABI_MINOR,
         OAR_FROZEN_EXACT ? " (exact: the frozen copy)" : "", failures);
  return failures ? 1 : 0;
}
