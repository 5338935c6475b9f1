/* options: turns the embedded-mode fields of sl_options (config_path,
 * config_text, or redis_url + deployments) into a validated sluiced
 * configuration (lib/core/config.h), so an embedded governor reads the same
 * schema, with the same file/line/key messages, as the daemon.
 * Pure apart from reading config_path; never prints. */
#ifndef SLUICE_LIB_OPTIONS_H
#define SLUICE_LIB_OPTIONS_H

#include <stddef.h>

#include "config.h"
#include "sluice.h"

/* Exactly one of config_path, config_text, redis_url (+ deployments) must
 * be set. Returns 0 and a new config (the caller's), or SL_EINVAL with the
 * reason in err. */
int options_load_config(const sl_options *o, config **cfg, char *err, size_t errlen);

/* The YAML for redis_url + deployments (the deployments mapping, flow or
 * block style, indented under the key when it spans lines). Returns a
 * malloc'd text, or NULL when the URL is too long or has control
 * characters, or when out of memory. */
char *options_compose_config(const char *url, const char *deployments);

#endif
