/* A plugin whose entry point calls a function no library defines: built
 * without --no-undefined, so only the loader can notice (tests/capi's
 * plugin load test: the load is refused with the symbol named, instead of
 * the process being killed at the first call). */
#include "attnc/plugin.h"

extern int attnc_test_function_nobody_defines(void);

int attnc_plugin_graphs_v1(void *ctx, attnc_plugin_add_fn add,
                           attnc_plugin_fail_fn fail) {
  (void)ctx;
  (void)add;
  (void)fail;
  return attnc_test_function_nobody_defines();
}
