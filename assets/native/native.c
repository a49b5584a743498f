// A Node-API addon with one function, trim(): glibc's malloc_trim(0). After start, a kctl
// process keeps 10-20 MiB of heap that the start freed (compiling its code, reading files):
// glibc returns free memory at the top of its heap on its own, but only malloc_trim gives back
// the free pages in the middle of it. Node has no call for that, so this is the smallest way in.
#include <malloc.h>
#include <node_api.h>

static napi_value trim(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value released;
  if (napi_get_boolean(env, malloc_trim(0) != 0, &released) != napi_ok) return NULL;
  return released;
}

NAPI_MODULE_INIT() {
  napi_value fn;
  if (napi_create_function(env, "trim", NAPI_AUTO_LENGTH, trim, NULL, &fn) != napi_ok) return NULL;
  if (napi_set_named_property(env, exports, "trim", fn) != napi_ok) return NULL;
  return exports;
}
