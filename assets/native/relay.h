// The front door's kernel relay (relay.c), registered by native.c.
#ifndef KCTL_RELAY_H
#define KCTL_RELAY_H
#include <node_api.h>

napi_value relay(napi_env env, napi_callback_info info);
napi_value relay_stop(napi_env env, napi_callback_info info);
napi_value relay_count(napi_env env, napi_callback_info info);

#endif
